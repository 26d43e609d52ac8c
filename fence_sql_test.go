package lock_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/seed05627090/lock"
)

// TestSQLFenceRefusesBadArguments: what SQLFence refuses before it sends
// anything (the transaction is nil: a call that sent a statement would
// panic). The statements themselves run against PostgreSQL in the postgres
// module's tests (postgres/fence_test.go), which has a driver.
func TestSQLFenceRefusesBadArguments(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		table, name string
		token       uint64
	}{
		{"", "", 7},
		{"", "invoice:\x00", 7},
		{"", "invoice:\xff", 7},
		{"", "invoice:7", 0},
		{"", "invoice:7", math.MaxInt64 + 1},
		{"lock fences", "invoice:7", 7},
		{"fences; DROP TABLE invoices", "invoice:7", 7},
		{`"Fences"`, "invoice:7", 7},
		{"a.b.c", "invoice:7", 7},
		{"1fences", "invoice:7", 7},
	} {
		err := lock.SQLFence{Table: c.table}.Advance(ctx, nil, c.name, c.token)
		assert.ErrorIs(t, err, lock.ErrInvalidArgument, "table %q, name %q, token %d", c.table, c.name, c.token)
	}
	assert.ErrorIs(t, lock.SQLFence{Table: "no table"}.CreateTable(ctx, nil), lock.ErrInvalidArgument)
}
