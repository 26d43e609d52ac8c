package lock

import "context"

// MiddlewareOptions configure Middleware. Set Name or NameFunc.
type MiddlewareOptions[A any] struct {
	// Name is the lock's name, the same for every call.
	Name string
	// NameFunc derives the lock's name from the handler's argument, for a lock
	// per resource ("order:" + id). It wins over Name. A call for which it
	// returns "" fails with [ErrInvalidArgument] and does not run the handler.
	NameFunc func(A) string
	Options
}

// Middleware wraps next into a handler of the same type that runs it under a
// lock: a fresh owner per call, the lock taken before next runs and released
// after it returns (or panics). next's results and error are passed through.
// A call that does not get the lock returns a *NotAcquiredError naming it
// ([ErrNotAcquired], with [ErrHeld], [ErrGracePeriod] or [ErrTimeout]) without running
// next; a call whose lock is lost while next runs has next's context cancelled
// and returns next's results with a *LostError joined to its error.
//
// Middleware returns an error ([ErrInvalidArgument]) for a nil client or
// handler, no name, a Name that Acquire would refuse, or bad durations.
func Middleware[A, R any](c *Client, next func(context.Context, A) (R, error), opts MiddlewareOptions[A]) (func(context.Context, A) (R, error), error) {
	keyOf, err := keyer(c, next == nil, opts.Name, opts.NameFunc, opts.Options)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, arg A) (R, error) {
		var res R
		key, err := keyOf(arg)
		if err != nil {
			return res, err
		}
		err = c.do(ctx, key, opts.Options, func(ctx context.Context) error {
			var err error
			res, err = next(ctx, arg)
			return err
		})
		return res, err
	}, nil
}

// keyer checks what Middleware, [HTTPMiddleware] and New share, and returns the
// function that gives the key of one call's lock: a fixed name is checked
// and made a key once, here; NameFunc's names on each call.
func keyer[A any](c *Client, nilHandler bool, name string, fn func(A) string, o Options) (func(A) (string, error), error) {
	switch {
	case c == nil:
		return nil, invalidf("nil client")
	case nilHandler:
		return nil, invalidf("nil handler")
	case name == "" && fn == nil:
		return nil, invalidf("no lock name: set Name or NameFunc")
	}
	if _, err := o.resolved(); err != nil {
		return nil, err
	}
	if fn != nil {
		return func(arg A) (string, error) { return c.checkName(fn(arg)) }, nil
	}
	key, err := c.checkName(name)
	if err != nil {
		return nil, err
	}
	return func(A) (string, error) { return key, nil }, nil
}
