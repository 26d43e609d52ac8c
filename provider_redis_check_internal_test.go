package lock

import (
	"strings"
	"testing"
)

// TestInfoReportServers reads the server's name, its own version and its
// mode from the INFO text of each server the provider is used with (the
// lines that matter, as each sends them). Valkey 8 says server_mode and
// valkey_version beside a redis_version of compatibility: before, the
// report took Mode "unknown" and Version "7.2.4" from it (issue 39).
func TestInfoReportServers(t *testing.T) {
	for _, c := range []struct {
		name, info                  string
		server, version, mode, warn string // warn: a part of the version warning, "" for none
	}{
		{"Redis 7.0", "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n",
			"redis", "7.0.15", "standalone", ""},
		{"Valkey 8.0", "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\nserver_mode:standalone\r\n",
			"valkey", "8.0.1", "standalone", ""},
		{"Valkey 8.0 Cluster node", "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\nserver_mode:cluster\r\n# Cluster\r\ncluster_enabled:1\r\n",
			"valkey", "8.0.1", "cluster", ""},
		{"a server named, without a version of its own", "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nredis_mode:standalone\r\n",
			"valkey", "7.2.4", "standalone", ""},
		{"Redis 6.0", "# Server\r\nredis_version:6.0.16\r\nredis_mode:standalone\r\n",
			"redis", "6.0.16", "standalone", "Redis 6.0.16 is older than 6.2"},
		{"no version, no mode", "# Server\r\n# Cluster\r\ncluster_enabled:1\r\n",
			"redis", UnknownSetting, "cluster", "could not read the Redis version"},
	} {
		t.Run(c.name, func(t *testing.T) {
			info := parseInfo(c.info)
			r := infoReport("127.0.0.1:1", info)
			if r.Server != c.server || r.Version != c.version || r.Mode != c.mode {
				t.Errorf("Server, Version, Mode = %q, %q, %q; want %q, %q, %q", r.Server, r.Version, r.Mode, c.server, c.version, c.mode)
			}
			var warned string
			for _, w := range r.warnings(infoValue(info, "redis_version")) {
				if strings.Contains(w, "6.2") {
					warned = w
				}
			}
			switch {
			case c.warn == "" && warned != "":
				t.Errorf("a version warning: %q", warned)
			case c.warn != "" && !strings.Contains(warned, c.warn):
				t.Errorf("version warning %q, want one with %q", warned, c.warn)
			}
		})
	}
}
