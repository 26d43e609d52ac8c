// HTTP shows lock.HTTPMiddleware: POST /orders/{id} is served under a lock per
// order, so two requests for one order are never processed at once; the
// second is answered 423 Locked with a Retry-After header, and the reason is
// logged.
//
//	go run ./examples/http          # demo: two concurrent requests, then exit
//	go run ./examples/http -serve   # serve on 127.0.0.1:8080 until interrupted
//	curl -i -X POST 127.0.0.1:8080/orders/42 & curl -i -X POST 127.0.0.1:8080/orders/42
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/seed05627090/lock"
)

func main() {
	serve := flag.Bool("serve", false, "serve on -addr until interrupted instead of running the demo")
	addr := flag.String("addr", "127.0.0.1:8080", "loopback address to serve on with -serve")
	flag.Parse()
	if err := run(*serve, *addr); err != nil {
		log.Fatal(err)
	}
}

func run(serve bool, addr string) error {
	// One Client per process. With several replicas behind a load balancer,
	// give them lock.NewRedisProvider so that they share the locks.
	c, err := lock.NewClient(lock.NewMemoryProvider())
	if err != nil {
		return err
	}
	defer c.Close()

	// The lock of a request is named after its order, so requests for
	// different orders run in parallel. Without Wait, a request that finds the
	// order locked is refused at once. The error handler logs why a request
	// was refused (the error names the key) and answers as the default does,
	// with a body that does not.
	withOrderLock, err := lock.HTTPMiddleware(c, lock.HTTPOptions{
		NameFunc: func(r *http.Request) string { return "order:" + r.PathValue("id") },
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			log.Printf("%s %s refused: %v", r.Method, r.URL.Path, err)
			lock.WriteHTTPError(w, r, err)
		},
		Options: lock.Options{MaxDuration: 30 * time.Second},
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}", withOrderLock(http.HandlerFunc(processOrder)))

	if !serve {
		addr = "127.0.0.1:0" // a free port, for the demo
	}
	if err := checkLoopback(addr); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	if serve {
		fmt.Printf("serving on http://%s (Ctrl-C to stop)\n", ln.Addr())
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		select {
		case err := <-served:
			return err
		case <-ctx.Done():
		}
	} else if err := demo("http://" + ln.Addr().String()); err != nil {
		_ = srv.Close()
		return err
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// processOrder is the protected handler. Its request context is cancelled if
// the lock is lost while it runs.
func processOrder(w http.ResponseWriter, r *http.Request) {
	l, _ := lock.FromContext(r.Context()) // the lock held for this request
	select {
	case <-time.After(500 * time.Millisecond): // charge the card...
	case <-r.Context().Done():
		http.Error(w, "interrupted", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintf(w, "order %s processed (fencing token %d)\n", r.PathValue("id"), l.Token())
}

// demo sends two requests for order 42, the second while the first is being
// processed, and one for order 7 alongside them, and prints the responses in
// the order the requests were sent.
func demo(base string) error {
	paths := []string{"/orders/42", "/orders/42", "/orders/7"}
	delays := []time.Duration{0, 100 * time.Millisecond, 100 * time.Millisecond}
	lines := make([]string, len(paths))
	errs := make([]error, len(paths))
	var wg sync.WaitGroup
	for i := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(delays[i]) // the second request comes while the first holds the lock
			lines[i], errs[i] = post(base, paths[i])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, l := range lines {
		fmt.Println(l)
	}
	return nil
}

// post sends an empty POST and describes the response.
func post(base, path string) (string, error) {
	resp, err := http.Post(base+path, "text/plain", nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	line := fmt.Sprintf("POST %s -> %s", path, resp.Status)
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		line += " (Retry-After: " + ra + "s)"
	}
	return line + ": " + strings.TrimSpace(string(body)), nil
}

// checkLoopback refuses to listen beyond this machine.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("address %s is not a loopback address", addr)
	}
	return nil
}
