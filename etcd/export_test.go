package etcd

// Sleep is sleep, for the tests of package etcd_test.
var Sleep = sleep
