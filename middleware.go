package lock

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
)

// MiddlewareOptions configure Middleware. Set Name or NameFunc.
type MiddlewareOptions[A any] struct {
	// Name is the lock's name, the same for every call.
	Name string
	// NameFunc derives the lock's name from the handler's argument, for a lock
	// per resource ("order:" + id). It wins over Name. A call for which it
	// returns "" fails with ErrInvalidArgument and does not run the handler.
	NameFunc func(A) string
	Options
}

// Middleware wraps next into a handler of the same type that runs it under a
// lock: a fresh owner per call, the lock taken before next runs and released
// after it returns (or panics). next's results and error are passed through.
// A call that does not get the lock returns a *NotAcquiredError naming it
// (ErrNotAcquired, with ErrHeld, ErrGracePeriod or ErrTimeout) without running
// next; a call whose lock is lost while next runs has next's context cancelled
// and returns next's results with a *LostError joined to its error.
//
// Middleware returns an error (ErrInvalidArgument) for a nil client or
// handler, no name, or bad durations.
func Middleware[A, R any](c *Client, next func(context.Context, A) (R, error), opts MiddlewareOptions[A]) (func(context.Context, A) (R, error), error) {
	name, err := namer(c, next == nil, opts.Name, opts.NameFunc, opts.Options)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, arg A) (R, error) {
		var res R
		err := c.Do(ctx, name(arg), opts.Options, func(ctx context.Context) error {
			var err error
			res, err = next(ctx, arg)
			return err
		})
		return res, err
	}, nil
}

// namer checks what Middleware, HTTPMiddleware and New share, and returns the
// function that names the lock of one call.
func namer[A any](c *Client, nilHandler bool, name string, fn func(A) string, o Options) (func(A) string, error) {
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
		return fn, nil
	}
	return func(A) string { return name }, nil
}

// HTTPMiddleware returns net/http middleware that serves each request under
// the lock that name derives from it (for example from a path value). A request
// that does not get the lock is answered 423 Locked with a Retry-After header;
// a request that name gives "" is answered 400 Bad Request; one that fails for
// another reason (the provider unreachable, the request's context ended) is
// answered 503 Service Unavailable. Retry-After is the time the blocking
// record had left to live: the holder's lease (renewed while it runs) or the
// rest of the grace period. The request's context is cancelled if the lock is lost while
// the handler runs.
func HTTPMiddleware(c *Client, name func(*http.Request) string, opts Options) (func(http.Handler) http.Handler, error) {
	if name == nil {
		return nil, invalidf("nil name function")
	}
	if _, err := namer(c, false, "", name, opts); err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ran := false
			err := c.Do(r.Context(), name(r), opts, func(ctx context.Context) error {
				ran = true
				next.ServeHTTP(w, r.WithContext(ctx))
				return nil
			})
			if err == nil || ran {
				return
			}
			var na *NotAcquiredError
			switch {
			case errors.As(err, &na) && (errors.Is(err, ErrHeld) || errors.Is(err, ErrGracePeriod) || errors.Is(err, ErrTimeout)):
				secs := int(math.Ceil(na.RetryAfter.Seconds()))
				w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
				http.Error(w, err.Error(), http.StatusLocked)
			case errors.Is(err, ErrInvalidArgument):
				http.Error(w, err.Error(), http.StatusBadRequest)
			default:
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
			}
		})
	}, nil
}
