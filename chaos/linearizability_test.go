package chaos

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// stockInput is one operation on product 1: a buy of one unit or a read.
type stockInput struct{ read bool }

// stockOutput is what the client saw.
type stockOutput struct {
	kind  outputKind
	stock int // for reads
}

type outputKind int

const (
	gotOrder   outputKind = iota // 201
	gotSoldOut                   // 409 sold-out: there was no unit left
	gotNothing                   // refused with "nothing was written" (429, 503) or never sent
	gotUnknown                   // no answer: it may or may not have happened
	gotStock                     // a read
)

// stockModel is the sequential specification of product 1: a counter that
// buys decrement while it is positive. A buy whose outcome the client could
// not learn may have happened or not, so the model is nondeterministic and
// such a buy stays open until the end of the history.
var stockModel = func(initial int) porcupine.Model {
	nm := &porcupine.NondeterministicModel{
		Init: func() []any { return []any{initial} },
		Step: func(state, input, output any) []any {
			s, out := state.(int), output.(stockOutput)
			if input.(stockInput).read {
				if out.stock == s {
					return []any{s}
				}
				return nil
			}
			switch out.kind {
			case gotOrder:
				if s >= 1 {
					return []any{s - 1}
				}
			case gotSoldOut:
				if s < 1 {
					return []any{s}
				}
			case gotNothing:
				return []any{s}
			case gotUnknown:
				if s >= 1 {
					return []any{s, s - 1}
				}
				return []any{s}
			}
			return nil
		},
		DescribeOperation: func(input, output any) string {
			out := output.(stockOutput)
			if input.(stockInput).read {
				return fmt.Sprintf("read() -> %d", out.stock)
			}
			return fmt.Sprintf("buy() -> %s", [...]string{"order", "sold out", "nothing", "unknown"}[out.kind])
		},
		DescribeState: func(state any) string { return fmt.Sprintf("stock %d", state.(int)) },
	}
	return nm.ToModel()
}

// TestLinearizableBurst records one burst of buys and stock reads against
// two redis-lock instances, one of which is killed halfway, and checks
// the history with porcupine against the stock model. Killed buys are
// open-ended: they may or may not have taken a unit.
func TestLinearizableBurst(t *testing.T) {
	r := newRig(t, rigOptions{})
	env := map[string]string{"SECKILL_STAGE": "redis-lock", "SECKILL_LOCK_TTL": "1s", "SECKILL_CRITICAL_SECTION_DELAY": "5ms"}
	a, b := r.start("a", env), r.start("b", env)
	stock, requests := pick(30, 80), pick(60, 160)
	r.reset(a, stock)
	f := &figures{Test: t.Name(), Fault: "linearizability of one burst (buys and reads, SIGKILL of one instance), checked with porcupine", Stage: "redis-lock"}
	r.record(f)

	bu := r.fire(burstOptions{targets: []*instance{a, b}, requests: requests, workers: 8, pace: 20 * time.Millisecond, deadline: 10 * time.Second, prefix: "lin", readers: 2})
	bu.waitCompleted(requests/3, 30*time.Second)
	calls, _, _ := r.killMidBurst(f, bu, stock, a, b)

	checkLinearizable(t, calls, stock)
}

// checkLinearizable checks the buys and reads of a burst of product 1 with
// porcupine against the stock model of initial units, and fails t, with a
// visualization in the artifacts, when the history is not linearizable.
func checkLinearizable(t *testing.T, calls []call, stock int) {
	t.Helper()
	var history []porcupine.Operation
	for _, c := range calls {
		op := porcupine.Operation{ClientId: 0, Input: stockInput{read: c.Op == "read"}, Call: int64(c.Start), Return: int64(c.End)}
		switch {
		case c.Op == "read" && c.Outcome == outOK:
			op.Output = stockOutput{kind: gotStock, stock: c.Stock}
		case c.Op == "read":
			continue // a failed read observed nothing
		case c.Outcome == outOK:
			op.Output = stockOutput{kind: gotOrder}
		case c.Outcome == outRefused && (c.Problem == "timeout" || c.Problem == "outcome-unknown"):
			op.Output, op.Return = stockOutput{kind: gotUnknown}, math.MaxInt64
		case c.Outcome == outRefused && c.Problem == "sold-out":
			op.Output = stockOutput{kind: gotSoldOut}
		case c.Outcome == outRefused, c.Outcome == outNotSent:
			op.Output = stockOutput{kind: gotNothing}
		default:
			// It may take effect at any time after it was sent.
			op.Output, op.Return = stockOutput{kind: gotUnknown}, math.MaxInt64
		}
		history = append(history, op)
	}
	model := stockModel(stock)
	res, info := porcupine.CheckOperationsVerbose(model, history, time.Minute)
	t.Logf("porcupine: %s over %d operations", res, len(history))
	if res != porcupine.Ok {
		if err := os.MkdirAll(artifacts, 0o755); err == nil {
			file := filepath.Join(artifacts, t.Name()+".html")
			if err := porcupine.VisualizePath(model, info, file); err == nil {
				t.Logf("visualization: %s", file)
			}
		}
		t.Errorf("history is %s, not linearizable against the stock model", res)
	}
}
