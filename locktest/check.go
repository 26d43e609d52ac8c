package locktest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Result is what Check found in a History.
type Result struct {
	// Ops is the number of operations checked (a grant copied into the
	// partition of an Observe counts once), and Partitions the number of
	// partitions: a lock, a counted name, a fenced resource, an Observe of a
	// role, or a hold as its Client told it.
	Ops, Partitions int
	// Open is the number of operations of unknown outcome (a timeout, an
	// outage, a dead process), left open for the checker.
	Open int
	// ByKind counts the partitions' operations by partition kind ("lock",
	// "claims", "fence", "observe", "client").
	ByKind map[string]int
	// Took is the checker's time.
	Took time.Duration
	// Illegal names the partitions that have no linearization: each is a
	// violation of its model. Empty when the history is linearizable.
	Illegal []string
	// Unknown names the partitions the checker gave up on (its time ran
	// out): neither proved linearizable nor not.
	Unknown []string
	// File is the visualization of the illegal partitions (porcupine's, an
	// HTML page: open it in a browser), written when Illegal is not empty,
	// beside the same operations as text (the name with .txt for .html);
	// "" otherwise, or when it could not be written (Err says why).
	File string
	Err  error
}

// OK reports whether every partition was proved linearizable.
func (r Result) OK() bool { return len(r.Illegal) == 0 && len(r.Unknown) == 0 }

// String sums the result up in a line.
func (r Result) String() string {
	kinds := make([]string, 0, len(r.ByKind))
	for k, n := range r.ByKind {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(kinds)
	s := fmt.Sprintf("%d operations (%d of unknown outcome) in %d partitions (%s), checked in %v", r.Ops, r.Open,
		r.Partitions, strings.Join(kinds, ", "), r.Took.Round(time.Millisecond))
	switch {
	case len(r.Illegal) > 0:
		s += fmt.Sprintf(": %d not linearizable (%s)", len(r.Illegal), strings.Join(r.Illegal, "; "))
		if r.File != "" {
			s += "; visualization: " + r.File
		}
	case len(r.Unknown) > 0:
		s += fmt.Sprintf(": %d undecided in the time given (%s)", len(r.Unknown), strings.Join(r.Unknown, "; "))
	default:
		s += ": linearizable"
	}
	return s
}

// CheckTimeout bounds the checker's time for one History, all partitions
// together; a partition left undecided is reported as Unknown.
const CheckTimeout = time.Minute

// Check checks every partition of h against its model (see models.go and
// docs/testing.md) and, when some have no linearization, writes the
// visualization of those to a file in dir ("" for the system's temporary
// directory) whose name starts with name. The operations recorded after
// Check began are not checked.
func (h *History) Check(dir, name string) Result {
	start := time.Now()
	parts := h.partitions()
	r := Result{Partitions: len(parts), ByKind: make(map[string]int)}
	model := historyModel()
	var illegal [][]porcupine.Operation
	for _, p := range parts {
		r.Ops += len(p.ops)
		for _, op := range p.ops {
			if op.Return == open {
				r.Open++
			}
		}
		r.ByKind[strings.TrimSpace(p.kind)] += len(p.ops)
		left := CheckTimeout - time.Since(start)
		if left <= 0 {
			r.Unknown = append(r.Unknown, p.name)
			continue
		}
		switch porcupine.CheckOperationsTimeout(model, p.ops, left) {
		case porcupine.Illegal:
			r.Illegal = append(r.Illegal, p.name)
			illegal = append(illegal, p.ops)
		case porcupine.Unknown:
			r.Unknown = append(r.Unknown, p.name)
		}
	}
	r.Took = time.Since(start)
	if len(illegal) > 0 {
		r.File, r.Err = visualize(model, illegal, dir, name)
	}
	return r
}

// CheckHistory checks h (History.Check) and fails t when a partition has no
// linearization, naming the file of the visualization; an undecided
// partition is logged, not failed. It logs the result's line either way,
// and returns the result.
func CheckHistory(t testing.TB, h *History) Result {
	t.Helper()
	r := h.Check(os.Getenv("LOCKTEST_HISTORY_DIR"), t.Name())
	if len(r.Illegal) > 0 {
		t.Errorf("locktest: the history is not linearizable: %s", r)
		if r.Err != nil {
			t.Errorf("locktest: the visualization could not be written: %v", r.Err)
		}
		return r
	}
	t.Logf("history: %s", r)
	return r
}

// partition is one partition of a History: the operations of one lock,
// counted name, fenced resource, Observe or hold.
type partition struct {
	name, kind string
	ops        []porcupine.Operation
}

// partitions splits what h recorded by partition, with the grants of a
// role copied into each partition of an Observe of it, and each observed
// term that no recorded grant has marked hidden when its owner queued for
// the role.
func (h *History) partitions() []partition {
	h.mu.Lock()
	ops := slices.Clone(h.ops)
	queued := make(map[string]bool, len(h.queued))
	for k := range h.queued {
		queued[k] = true
	}
	h.mu.Unlock()

	byPart := make(map[string][]porcupine.Operation)
	granted := make(map[string]bool) // partLock+key and token
	for _, op := range ops {
		in := op.Input.(input)
		byPart[in.part] = append(byPart[in.part], op)
		if out := op.Output.(output); in.kind == opGrant && out.res == resOK {
			granted[in.part+"\x00"+fmt.Sprint(out.token)] = true
		}
	}
	names := make([]string, 0, len(byPart))
	for name := range byPart {
		names = append(names, name)
	}
	sort.Strings(names)
	parts := make([]partition, 0, len(names))
	for _, name := range names {
		p := partition{name: name, ops: byPart[name]}
		for _, k := range []string{partLock, partClaims, partFence, partObserve, partClient} {
			if strings.HasPrefix(name, k) {
				p.kind = k
			}
		}
		if p.kind == partObserve {
			key := p.ops[0].Input.(input).via
			for i, op := range p.ops {
				in, out := op.Input.(input), op.Output.(output)
				if out.token != 0 && !granted[partLock+key+"\x00"+fmt.Sprint(out.token)] && queued[partLock+key+"\x00"+out.owner] {
					in.value = hiddenGrant
					p.ops[i].Input = in
				}
			}
			for _, op := range byPart[partLock+key] {
				if in := op.Input.(input); in.kind == opGrant {
					in.part = name // stepped by the Observe's model
					op.Input = in
					p.ops = append(p.ops, op)
				}
			}
		}
		for i := range p.ops {
			p.ops[i].Metadata = name
		}
		parts = append(parts, p)
	}
	return parts
}

// historyModel is the model of every partition: the step of the kind of
// partition the operation is in, from a nil state at the start.
func historyModel() porcupine.Model {
	m := porcupine.NondeterministicModel{
		Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
			var out [][]porcupine.Operation
			at := make(map[any]int)
			for _, op := range ops {
				i, ok := at[op.Metadata]
				if !ok {
					i = len(out)
					at[op.Metadata] = i
					out = append(out, nil)
				}
				out[i] = append(out[i], op)
			}
			return out
		},
		Init: func() []any { return []any{nil} },
		Step: func(state, in, out any) []any {
			return step(state, in.(input), out.(output))
		},
		DescribeOperation: func(in, out any) string { return describe(in.(input), out.(output)) },
		DescribeState:     describeState,
	}
	return m.ToModel()
}

func step(state any, in input, out output) []any {
	switch {
	case strings.HasPrefix(in.part, partLock):
		s, _ := state.(lockState)
		return anys(stepLock(s, in, out))
	case strings.HasPrefix(in.part, partClaims):
		s, _ := state.(claimsState)
		return anys(stepClaims(s, in, out))
	case strings.HasPrefix(in.part, partFence):
		s, _ := state.(fenceState)
		return anys(stepFence(s, in, out))
	case strings.HasPrefix(in.part, partObserve):
		s, _ := state.(observeState)
		return anys(stepObserve(s, in, out))
	case strings.HasPrefix(in.part, partClient):
		s, _ := state.(clientState)
		return anys(stepClient(s, in, out))
	}
	return nil
}

func anys[S any](ss []S) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// short shortens an owner for the visualization: its last 6 characters.
func short(owner string) string {
	if len(owner) > 6 {
		return "…" + owner[len(owner)-6:]
	}
	return owner
}

func describe(in input, out output) string {
	var b strings.Builder
	b.WriteString(in.kind.String())
	switch in.kind {
	case opWrite:
		fmt.Fprintf(&b, "(%q, token %d)", in.value, in.token)
	case opRead, opForce:
	case opObserved:
	case opClaim, opClaimLower:
		fmt.Fprintf(&b, "(%s, weight %d)", short(in.owner), in.weight)
	default:
		fmt.Fprintf(&b, "(%s)", short(in.owner))
	}
	if in.via != "" && in.kind != opObserved {
		b.WriteString(" by " + in.via)
	}
	b.WriteString(" -> " + out.res.String())
	switch {
	case out.res != resOK:
	case in.kind == opGrant || in.kind == opClaim || in.kind == opHeld:
		fmt.Fprintf(&b, " token %d", out.token)
	case in.kind == opRead:
		fmt.Fprintf(&b, " %q", out.value)
	case in.kind == opObserved:
		fmt.Fprintf(&b, " term %d of %s", out.token, short(out.owner))
		if in.value == hiddenGrant {
			b.WriteString(" (a hand-off not recorded)")
		}
	case in.kind == opForce:
		fmt.Fprintf(&b, " removed %s", short(out.owner))
	}
	return b.String()
}

func describeState(state any) string {
	switch s := state.(type) {
	case nil:
		return "start"
	case lockState:
		holder := "free"
		if s.holder != "" {
			holder = fmt.Sprintf("held by %s token %d", short(s.holder), s.token)
			if s.finished {
				holder += " (grace period)"
			}
		}
		return fmt.Sprintf("%s; greatest token %d", holder, s.max)
	case claimsState:
		var cs []string
		for _, c := range s.claims() {
			cs = append(cs, fmt.Sprintf("%s weight %d token %d", short(c.owner), c.weight, c.token))
		}
		return fmt.Sprintf("claims [%s]; greatest token %d", strings.Join(cs, ", "), s.max)
	case fenceState:
		return fmt.Sprintf("value %q, mark %d", s.value, s.mark)
	case observeState:
		return fmt.Sprintf("last term sent %d", s.last)
	case clientState:
		return fmt.Sprintf("loss told %v, released clean %v", s.told, s.clean)
	}
	return fmt.Sprint(state)
}

// visualize writes porcupine's visualization of the partitions to a new
// file in dir and returns its name.
func visualize(model porcupine.Model, parts [][]porcupine.Operation, dir, name string) (string, error) {
	var ops []porcupine.Operation
	for _, p := range parts {
		ops = append(ops, p...)
	}
	_, info := porcupine.CheckOperationsVerbose(model, ops, CheckTimeout)
	clean := strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == ':' || r == os.PathSeparator {
			return '-'
		}
		return r
	}, name)
	f, err := os.CreateTemp(dir, "locktest-"+clean+"-*.html")
	if err != nil {
		return "", err
	}
	if err := porcupine.Visualize(model, info, f); err != nil {
		_ = f.Close()
		return "", err
	}
	path, _ := filepath.Abs(f.Name())
	if err := f.Close(); err != nil {
		return "", err
	}
	return path, os.WriteFile(strings.TrimSuffix(path, ".html")+".txt", []byte(listing(parts)), 0o644)
}

// listing is the operations of parts as text, each partition's in the
// order of their calls: call and return (ms from the start of the run;
// "-" for an open operation), process, and the operation.
func listing(parts [][]porcupine.Operation) string {
	var b strings.Builder
	for _, p := range parts {
		ops := slices.Clone(p)
		sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
		fmt.Fprintf(&b, "%v\n", ops[0].Metadata)
		for _, op := range ops {
			ret := "-"
			if op.Return != open {
				ret = fmt.Sprintf("%.3f", float64(op.Return)/1e6)
			}
			fmt.Fprintf(&b, "  %10.3f %10s  p%-3d %s\n", float64(op.Call)/1e6, ret, op.ClientId, describe(op.Input.(input), op.Output.(output)))
		}
	}
	return b.String()
}
