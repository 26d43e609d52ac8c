package rueidis

// NewDriver returns the driver of a client, for the tests that send it
// commands themselves.
var NewDriver = newDriver
