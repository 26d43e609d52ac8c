package lock

// Doc comments checked against internals that the package's own tests can
// reach and lock_test's cannot (docs_test.go has the others).

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
	"time"
)

// funcDoc returns the doc comment of the top-level function name in the
// file at path, its white space as single spaces.
func funcDoc(t *testing.T, path, name string) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Name.Name == name {
			return strings.Join(strings.Fields(fd.Doc.Text()), " ")
		}
	}
	t.Fatalf("%s declares no func %s", path, name)
	return ""
}

// TestWithPollIntervalDoc checks that WithPollInterval's doc says how often
// waiters look again as lookAgain computes it: how many at the head of a
// queue look every interval, from which place they look every second
// interval, and the longest a waiter goes without looking (issue 38: the
// doc said every waiter looked every interval).
func TestWithPollIntervalDoc(t *testing.T) {
	poll := time.Second
	look := func(c *Client, place int) time.Duration {
		return (&waiter{acquisition: acquisition{c: c}, place: place}).lookAgain()
	}
	c := &Client{poll: poll}
	head := 0
	for look(c, head) == poll {
		head++
	}
	second := head
	for look(c, second) == 2*poll {
		second++
	}
	if head == 0 || second == head {
		t.Fatalf("waiters at places 0-%d look every interval, %d-%d every second one: no back-off?", head-1, head, second-1)
	}
	longest := look(&Client{poll: 24 * time.Hour}, 0) // a d longer than the cap
	if got := look(c, 1<<20); got != longest {
		t.Fatalf("the last of a long queue looks every %v, a poll of a day every %v: one cap was expected", got, longest)
	}
	words := map[time.Duration]string{time.Minute: "once a minute", time.Hour: "once an hour"}[longest]
	if words == "" {
		t.Fatalf("no words for the cap %v: add them", longest)
	}

	doc := funcDoc(t, "options.go", "WithPollInterval")
	for _, want := range []string{
		fmt.Sprintf("the first %d waiters", head),
		fmt.Sprintf("places %d to %d every 2d", head, second-1),
		"at least " + words,
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("WithPollInterval's doc should say %q (as lookAgain does): %s", want, doc)
		}
	}
}
