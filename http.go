package lock

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"
)

// DefaultHTTPMaxWait bounds the wait of a request that [HTTPMiddleware] serves
// with Wait and no MaxWait: a web request that waits longer for a lock than
// its client will wait for an answer serves nobody. Set MaxWait for another
// bound.
const DefaultHTTPMaxWait = 5 * time.Second

// HTTPOptions configure [HTTPMiddleware]. Set Name or NameFunc; every other
// field has a zero value that works.
type HTTPOptions struct {
	// Name is the lock's name, the same for every request.
	Name string

	// NameFunc derives the lock's name from the request, for a lock per
	// resource (for example "order:" + r.PathValue("id")). It wins over Name.
	// A request for which it returns "" is not served: ErrorHandler gets an
	// error matching [ErrInvalidArgument] (by default, 400 Bad Request).
	NameFunc func(*http.Request) string

	// ErrorHandler answers a request that was not served because its lock was
	// not acquired, or could not be asked for. err is the full error, for
	// logging: a *NotAcquiredError ([ErrNotAcquired], with [ErrHeld],
	// [ErrGracePeriod], [ErrTimeout] or the request context's error), an error
	// matching [ErrInvalidArgument], or the provider's error ([ErrUnavailable]).
	// It holds the lock's key and the provider's words, so it should not be
	// written to the response as it is. Nil means [WriteHTTPError], with a log
	// record through the Client's logger ([WithLogger]): "lock: request not
	// served" at warning level for a 503 that the provider caused
	// (ErrUnavailable) or that has no known cause, at debug level for the
	// rest (423 refusals, 400 for a bad name, 503 for a request whose
	// context ended or a closed Client). A handler of your own logs what it
	// wants.
	ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)

	// Options say how each request's lock is acquired and held; the zero
	// value tries once, without waiting. With Wait, a MaxWait of zero means
	// [DefaultHTTPMaxWait] (5 s; MaxDuration when that is shorter), not
	// MaxDuration as elsewhere: a request waits seconds, not an hour.
	Options
}

// HTTPMiddleware returns net/http middleware that serves each request under
// its lock: a fresh owner per request, the lock taken before the handler runs
// and released after it returns (or panics). The handler's request context
// carries the lock (see [FromContext]) and is cancelled if the lock is lost
// while the handler runs; that loss, and a failed release, are not answered
// again, as the handler has answered (watch them with [WithEvents]).
//
// A request that does not get its lock is not served: opts.ErrorHandler
// answers it, by default [WriteHTTPError].
//
// HTTPMiddleware returns an error ([ErrInvalidArgument]) for a nil client, no
// name, a Name that Acquire would refuse, or bad durations.
func HTTPMiddleware(c *Client, opts HTTPOptions) (func(http.Handler) http.Handler, error) {
	keyOf, err := keyer(c, false, opts.Name, opts.NameFunc, opts.Options)
	if err != nil {
		return nil, err
	}
	fail := opts.ErrorHandler
	if fail == nil {
		fail = func(w http.ResponseWriter, r *http.Request, err error) {
			logRefusal(c.log, r, err, writeHTTPError(w, err))
		}
	}
	o := opts.Options
	if o.Wait && o.MaxWait == 0 {
		o.MaxWait = DefaultHTTPMaxWait
		if o.MaxDuration > 0 {
			o.MaxWait = min(o.MaxWait, o.MaxDuration)
		}
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ran := false
			key, err := keyOf(r)
			if err == nil {
				err = c.do(r.Context(), key, o, func(ctx context.Context) error {
					ran = true
					next.ServeHTTP(w, r.WithContext(ctx))
					return nil
				})
			}
			if err != nil && !ran {
				fail(w, r, err)
			}
		})
	}, nil
}

// WriteHTTPError is the default [HTTPOptions.ErrorHandler]. Call it from an
// ErrorHandler of your own to log err and keep these answers. The body is the
// status text alone: never the lock's key or the provider's error.
//
//   - 423 Locked when the lock is held by another owner ([ErrHeld]), a wait for
//     it timed out (ErrTimeout), or it is in its grace period
//     (ErrGracePeriod), with a Retry-After header: the whole seconds after
//     which a retry may succeed. In a grace period that is the rest of it,
//     rounded up; otherwise 1, since the holder's lease, renewed while it
//     runs, says nothing about when it finishes.
//   - 400 Bad Request when the lock name is empty or too long
//     (ErrInvalidArgument).
//   - 503 Service Unavailable otherwise: the provider unreachable or failing
//     (ErrUnavailable, also when a wait ended while the provider had not
//     answered a call for a second, or had not answered the first), the
//     client closed, the request's context ended.
//
// It logs nothing; [HTTPMiddleware]'s default handler logs (see
// HTTPOptions.ErrorHandler).
func WriteHTTPError(w http.ResponseWriter, _ *http.Request, err error) {
	writeHTTPError(w, err)
}

// writeHTTPError is [WriteHTTPError]; it returns the status it answered.
func writeHTTPError(w http.ResponseWriter, err error) int {
	code := http.StatusServiceUnavailable
	var na *NotAcquiredError
	switch {
	case errors.Is(err, ErrUnavailable):
	case errors.As(err, &na) && (errors.Is(err, ErrHeld) || errors.Is(err, ErrGracePeriod) || errors.Is(err, ErrTimeout)):
		code = http.StatusLocked
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(na)))
	case errors.Is(err, ErrInvalidArgument):
		code = http.StatusBadRequest
	}
	http.Error(w, http.StatusText(code), code)
	return code
}

// logRefusal logs a request that the default ErrorHandler answered with
// code: at warning level a 503 that the provider caused, or whose cause is
// not known; at debug level the refusals a service expects (a held lock, a
// bad name, a request whose context ended, a closed Client).
func logRefusal(log *slog.Logger, r *http.Request, err error, code int) {
	level := slog.LevelDebug
	var na *NotAcquiredError
	if code == http.StatusServiceUnavailable && !errors.Is(err, ErrClosed) && (errors.Is(err, ErrUnavailable) || !errors.As(err, &na)) {
		level = slog.LevelWarn
	}
	ctx := r.Context()
	if !log.Enabled(ctx, level) {
		return
	}
	log.Log(ctx, level, "lock: request not served", "method", r.Method, "path", r.URL.Path, "status", code, "err", err)
}

// retryAfterSeconds is the Retry-After of a 423, as [WriteHTTPError] says.
func retryAfterSeconds(na *NotAcquiredError) int {
	if !errors.Is(na.Reason, ErrGracePeriod) {
		return 1
	}
	return max(int((na.RetryAfter+time.Second-1)/time.Second), 1)
}
