package lock

import (
	"context"
	"reflect"
	"runtime"
	"strings"
	"time"
)

// PrimitiveOptions configure New. The zero value names the lock after the
// handler, tries once, and frees the lock when the handler returns.
type PrimitiveOptions[T any] struct {
	// Name is the lock's name. When Name and NameFunc are empty, the name is the
	// handler's full name as the runtime reports it: "example.com/app/jobs.Func"
	// for a top-level function, "example.com/app/jobs.(*Type).Method" for a
	// method value with a pointer receiver; New refuses other handlers (closures,
	// value receivers, interface methods) without a name. A derived name is the
	// same across replicas of one binary; set Name when versions must agree.
	Name string
	// NameFunc derives the name from Run's argument; it wins over Name.
	NameFunc func(T) string
	// GracePeriodFunc derives the grace period from Run's argument; it wins over
	// [Options.GracePeriod]. A negative result fails the call with
	// [ErrInvalidArgument] before the lock is taken.
	GracePeriodFunc func(T) time.Duration
	Options
}

// Primitive is a handler declared to run under a lock: in a service, a job that
// must run in one replica at a time (no Wait), a migration that every replica
// waits for and runs in turn (Wait), or a job that runs at most once per window
// (GracePeriod). Create it with New; it is safe for concurrent use.
type Primitive[T any] struct {
	c       *Client
	handler func(context.Context, T) error
	name    string // the name, without NameFunc
	keyOf   func(T) (string, error)
	opts    PrimitiveOptions[T]
}

// New declares handler as a Primitive on c. It returns an error
// ([ErrInvalidArgument]) for a nil client or handler, a Name that Acquire would
// refuse, and bad durations.
func New[T any](c *Client, handler func(context.Context, T) error, opts PrimitiveOptions[T]) (*Primitive[T], error) {
	name := opts.Name
	if name == "" && opts.NameFunc == nil && handler != nil {
		name = funcName(handler)
		if name == "" {
			return nil, invalidf("no lock name: set Name or NameFunc (the handler is a closure or a method value whose type cannot be told from its name)")
		}
	}
	keyOf, err := keyer(c, handler == nil, name, opts.NameFunc, opts.Options)
	if err != nil {
		return nil, err
	}
	return &Primitive[T]{c: c, handler: handler, name: name, keyOf: keyOf, opts: opts}, nil
}

// Name returns the name of the lock that Run(ctx, arg) takes.
func (p *Primitive[T]) Name(arg T) string {
	if p.opts.NameFunc != nil {
		return p.opts.NameFunc(arg)
	}
	return p.name
}

// Run runs the handler with arg under the lock, with a fresh owner; concurrent
// Runs never both enter, in this process or any other that shares the
// provider. It returns nil when the handler ran and succeeded, the handler's
// error when it failed (the lock is released all the same), and a
// *NotAcquiredError when it did not run: errors.Is tells [ErrHeld] (another run
// held the lock, no Wait), [ErrGracePeriod] (a run ended within the grace
// period), [ErrTimeout] (waited MaxWait) or the context's error. A run whose
// lock was lost returns a *LostError, joined to the handler's error.
func (p *Primitive[T]) Run(ctx context.Context, arg T) error {
	o := p.opts.Options
	if p.opts.GracePeriodFunc != nil {
		o.GracePeriod = p.opts.GracePeriodFunc(arg)
	}
	key, err := p.keyOf(arg)
	if err != nil {
		return err
	}
	return p.c.do(ctx, key, o, func(ctx context.Context) error {
		return p.handler(ctx, arg)
	})
}

// funcName returns a name for the lock of handler fn that is the same in every
// replica of a binary and differs between handlers: the name of a top-level
// function ("example.com/app/jobs.Func"), or of a method value with a
// pointer receiver ("example.com/app/jobs.(*Type).Method"). It returns ""
// for the rest: a closure is named after its position in its enclosing
// function, and a method value of a value receiver is named like one taken
// from an interface, which every implementation of the interface would
// share.
func funcName(fn any) string {
	f := runtime.FuncForPC(reflect.ValueOf(fn).Pointer())
	if f == nil {
		return ""
	}
	name := f.Name()
	method, isMethod := strings.CutSuffix(name, "-fm")
	switch {
	case isMethod && strings.Contains(method, ".(*"):
		return method
	case isMethod, strings.Contains(name, ".func"):
		return ""
	}
	return name
}
