// Package idempotency makes a retried buy or grab safe: a request that
// carries an Idempotency-Key (after the IETF httpapi draft) runs once, and
// every retry with the same key gets the first answer back, byte for byte.
//
// Records live in Redis, one per (user, route, key), for the retention
// period (24 h by default). A request first claims the record with an
// in-flight marker owned by a random token and leased for a short time;
// when it finishes, the marker is replaced by the stored response. A
// process that dies mid-request leaves only the marker, whose lease runs
// out, so a crash never blocks a key forever; the request that takes the
// key over then knows (Claim.Retaken) that an earlier run may have bought,
// as does the retry of a request that timed out (Store.Unknown).
package idempotency

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel errors.
var (
	// ErrInvalidKey: the header is not 1 to 255 visible ASCII characters.
	ErrInvalidKey = errors.New("invalid Idempotency-Key")
	// ErrInFlight: the first request with this key has not finished.
	ErrInFlight = errors.New("request with this Idempotency-Key still in flight")
	// ErrMismatch: the key was first used with a different request body.
	ErrMismatch = errors.New("Idempotency-Key reused with a different request")
	// ErrUnavailable: Redis could not be reached, so the request was not run.
	ErrUnavailable = errors.New("idempotency store unavailable")
	// ErrNotReplicated: a claim or a settle was written on the primary,
	// but fewer replicas than Options.Replicas confirmed it within
	// Options.ReplicaWait (or WAIT's answer did not come back): a
	// failover now may lose it.
	ErrNotReplicated = errors.New("idempotency record not confirmed on a replica")
	// ErrTried comes with ErrUnavailable from a claim of a key whose
	// earlier request left its outcome unknown (Claim.Retaken), given
	// back unconfirmed: this request did nothing, but that one may have
	// bought, and it is still unknown.
	ErrTried = errors.New("an earlier request with this Idempotency-Key may have run")
)

// MaxKeyLen is the longest key accepted.
const MaxKeyLen = 255

// ParseKey validates an Idempotency-Key header value. The draft defines the
// field as a Structured Field string, so a quoted value is unquoted; a bare
// token is accepted too, since many clients send one.
func ParseKey(header string) (string, error) {
	k := header
	if len(k) >= 2 && k[0] == '"' && k[len(k)-1] == '"' {
		k = k[1 : len(k)-1]
		if strings.ContainsAny(k, `"\`) {
			return "", fmt.Errorf("%w: escapes are not supported", ErrInvalidKey)
		}
	}
	if len(k) < 1 || len(k) > MaxKeyLen {
		return "", fmt.Errorf("%w: must be 1 to %d characters", ErrInvalidKey, MaxKeyLen)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return "", fmt.Errorf("%w: only visible ASCII characters are allowed", ErrInvalidKey)
		}
	}
	return k, nil
}

// Response is what is stored and replayed.
type Response struct {
	Status int               `json:"status"`
	Header map[string]string `json:"header,omitempty"`
	Body   []byte            `json:"body"`
}

// record is the stored JSON value: in flight (Token and LeaseUntil set),
// done (Response set), or tried with its outcome unknown (Tried).
type record struct {
	Token       string    `json:"token,omitempty"`
	Fingerprint string    `json:"fp"`
	LeaseUntil  int64     `json:"lease_until,omitempty"` // ms since the epoch, Redis's clock
	Response    *Response `json:"response,omitempty"`
	Tried       bool      `json:"tried,omitempty"`
}

// Options configure a Store.
type Options struct {
	Prefix    string        // default "idem:"
	Retention time.Duration // how long a finished response is kept; default 24h
	Lease     time.Duration // how long an in-flight claim holds the key; default 60s
	// Replicas, when above 0, is how many replicas must confirm each
	// claim and each settle (WAIT, right behind its script on the
	// connection that ran it; on a Cluster, a connection to the master
	// of the record's slot) before it returns without error: a failover
	// to one of them keeps the record. A claim they do not confirm is
	// given back and its request does not run (Begin fails with
	// ErrUnavailable and ErrNotReplicated, and ErrTried for a key tried
	// before); a settle fails with ErrNotReplicated.
	Replicas int
	// ReplicaWait bounds the wait for Replicas; default 100ms.
	ReplicaWait time.Duration
}

// Store keeps idempotency records in Redis.
type Store struct {
	rdb  redis.UniversalClient
	opts Options
	// checked holds BeginChecked's scripts, one per refusal check's Src;
	// settles the settle scripts, one per Also's Src.
	checked, settles sync.Map
	used             usedReads // Used's reads, gathered (used.go)
	// batches carries the pipelines of Used's reads: rdb, or a client of
	// the same server that checks its connections (SetBatchClient).
	batches redis.UniversalClient
}

// SetBatchClient sends the pipelines of gathered Used reads through c, a
// client of the same Redis as the Store's whose pool checks each
// connection before use (go-redis's own dialer), so that a connection the
// server closed costs no pipeline of readers (used.go). Call it before
// the Store is used.
func (s *Store) SetBatchClient(c redis.UniversalClient) {
	if c != nil {
		s.batches = c
	}
}

// New returns a Store over rdb.
func New(rdb redis.UniversalClient, opts Options) *Store {
	if opts.Prefix == "" {
		opts.Prefix = "idem:"
	}
	if opts.Retention <= 0 {
		opts.Retention = 24 * time.Hour
	}
	if opts.Lease <= 0 {
		opts.Lease = 60 * time.Second
	}
	if opts.ReplicaWait <= 0 {
		opts.ReplicaWait = 100 * time.Millisecond
	}
	opts.ReplicaWait = max(opts.ReplicaWait, time.Millisecond) // WAIT's 0 waits for ever
	return &Store{rdb: rdb, opts: opts, batches: rdb}
}

// Replicated reports whether a claim and a settle wait for replicas
// (Options.Replicas). A claim that waits must take nothing (a Refusal
// that takes units): one no replica confirms does not run.
func (s *Store) Replicated() bool { return s.opts.Replicas > 0 }

// Claim is the right to run one request and record its answer.
type Claim struct {
	key     string
	token   string
	fp      string
	retaken bool
	reply   string
	also    Also
}

// Reply is what the Refusal's check answered when it did not refuse a key
// never used: the result of a first step it took in the claim's script
// (see Refusal), or "".
func (c *Claim) Reply() string { return c.reply }

// Also is work a settle of the claim does in Redis, in the same script as
// the settle, before it: Src defines local function also(keys, args). It
// runs whichever settle comes (Finish, Abandon, Unknown), and whether or
// not the claim still owns its record, so it must be right in every case
// (confirming a reservation whose order is committed). Its keys must live
// on the store's Redis (see Checks).
type Also struct {
	Src  string
	Keys []string
	Args []any
}

// Also makes the claim's settle run a as well (see Also); the last one set
// is run.
func (c *Claim) Also(a Also) { c.also = a }

// Retaken reports whether an earlier request with this key ran and left
// its outcome unknown: it was cut off by a crash (its lease ran out) or by
// its deadline. What it did, if anything, is in the database; the retry
// should look there before it decides.
func (c *Claim) Retaken() bool { return c.retaken }

// Fingerprint hashes what makes two requests "the same": method, path and
// body.
func Fingerprint(method, path string, body []byte) string {
	b := make([]byte, 0, len(method)+len(path)+2+len(body))
	b = append(append(append(append(b, method...), '\n'), path...), '\n')
	sum := sha256.Sum256(append(b, body...))
	return hex.EncodeToString(sum[:])
}

// Begin claims (user, route, key) for a request with the given fingerprint.
// It returns a Claim when the request should run, or the stored Response
// when it already ran. It fails with ErrInFlight, ErrMismatch or
// ErrUnavailable. A Claim on a key whose earlier run left its outcome
// unknown says so (Claim.Retaken).
func (s *Store) Begin(ctx context.Context, user, route, key, fingerprint string) (*Claim, *Response, error) {
	return s.BeginChecked(ctx, user, route, key, fingerprint, Refusal{})
}

// Refusal is a check that BeginChecked runs in Redis, in the same script as
// the claim, for a key never used: a request it refuses does not run, and
// nothing is claimed or stored under its key. It is for answers that took
// nothing, so that a retry has nothing to miss (a buy of an item sold out).
// Src is Lua that defines local function refuse(keys, args), which returns
// why the request is refused (a string), or false. A refusal writes
// nothing. With false it may return a second value, a string, having done
// the request's first step (taken a unit): the key is claimed, and the
// Claim's Reply says what the step answered. Its keys must live on the
// store's Redis (see Checks).
type Refusal struct {
	Src  string
	Keys []string
	Args []any
}

// RefusedError is BeginChecked's error when the check refused the request.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return "refused before the claim: " + e.Reason }

// ScriptError is BeginChecked's error when the claim's script failed. If
// its reply was lost on the way back (a timeout, a dropped connection),
// the script may have run: the key may be claimed, and a Refusal's step
// taken; the cause (Unwrap) tells. Claim is the claim it would have been:
// settling it (Unknown) settles the record only if the script claimed it.
// It matches ErrUnavailable.
type ScriptError struct {
	Claim *Claim
	err   error
}

func (e *ScriptError) Error() string { return fmt.Sprintf("%v: claim: %v", ErrUnavailable, e.err) }

func (e *ScriptError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

// Ping makes one round trip to the Redis that keeps the records: what a
// keyed request pays at least, before its claim's script runs.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("%w: ping: %w", ErrUnavailable, err)
	}
	return nil
}

// Used reports whether (user, route, key) has a record: a claim in flight,
// an outcome left unknown, or a stored answer. It is one plain read, no
// script: what a keyed buy of an item this instance remembers as sold out
// pays, since a key never used can be refused for good without a claim
// (nothing is stored for a refusal, see Refusal), while a used one must be
// claimed as ever, so that a replay still gets its answer. Reads that
// arrive while another is in flight go together in one pipeline (used.go).
func (s *Store) Used(ctx context.Context, user, route, key string) (bool, error) {
	used, err := s.exists(ctx, s.recordKey(user, route, key))
	if err != nil {
		return false, fmt.Errorf("%w: looking up the key: %w", ErrUnavailable, err)
	}
	return used, nil
}

// Checks reports whether BeginChecked can run a check on keys of rdb: the
// store keeps its records on rdb itself, and rdb is one server (a
// *redis.Client), not a Cluster or a Ring, where the record and the checked
// keys could live on different nodes.
func (s *Store) Checks(rdb redis.UniversalClient) bool {
	one, ok := rdb.(*redis.Client)
	return ok && one != nil && rdb == s.rdb
}

// BeginChecked is Begin with a refusal check. When there is no record under
// the key and the check refuses, it fails with a *RefusedError and leaves
// no record; otherwise it answers as Begin. The zero Refusal checks nothing.
func (s *Store) BeginChecked(ctx context.Context, user, route, key, fingerprint string, r Refusal) (*Claim, *Response, error) {
	if r.Src == "" {
		return s.begin(ctx, plainBegin, user, route, key, fingerprint, r)
	}
	script, ok := s.checked.Load(r.Src)
	if !ok {
		script, _ = s.checked.LoadOrStore(r.Src, redis.NewScript(r.Src+"\n"+beginSrc))
	}
	return s.begin(ctx, script.(*redis.Script), user, route, key, fingerprint, r)
}

func (s *Store) begin(ctx context.Context, script *redis.Script, user, route, key, fingerprint string, r Refusal) (*Claim, *Response, error) {
	c := &Claim{key: s.recordKey(user, route, key), token: newToken(), fp: fingerprint}
	keys := append([]string{c.key}, r.Keys...)
	args := append([]any{c.token, fingerprint, s.opts.Lease.Milliseconds(), s.opts.Retention.Milliseconds()}, r.Args...)
	var res []string
	var w waited
	var err error
	if s.opts.Replicas <= 0 {
		res, err = script.Run(ctx, s.rdb, keys, args...).StringSlice()
	} else {
		res, w, err = s.beginAndWait(ctx, script, keys, args)
	}
	if err != nil {
		return nil, nil, &ScriptError{Claim: c, err: err}
	}
	res = append(res, "", "") // a short reply falls to the default case
	switch res[0] {
	case "claimed", "retaken":
		c.reply, c.retaken = res[1], res[0] == "retaken"
		if short := w.short(s.opts); short != nil {
			return nil, nil, s.unconfirmed(ctx, c, short)
		}
		return c, nil, nil
	case "inflight":
		return nil, nil, ErrInFlight
	case "mismatch":
		return nil, nil, ErrMismatch
	case "refused":
		return nil, nil, &RefusedError{Reason: res[1]}
	case "done":
		var r record
		if json.Unmarshal([]byte(res[1]), &r) != nil || r.Response == nil {
			return nil, nil, fmt.Errorf("%w: corrupt record", ErrUnavailable)
		}
		return nil, r.Response, nil
	}
	return nil, nil, fmt.Errorf("%w: claim answered %q", ErrUnavailable, res[0])
}

var (
	//go:embed scripts/begin.lua
	beginSrc string
	// plainBegin is the claim with no refusal check.
	plainBegin = redis.NewScript("local function refuse() return false end\n" + beginSrc)
)

// finish replaces the in-flight marker with the response (or deletes it)
// only if this claim still owns it: its lease may have run out and another
// request may have claimed the key since. It runs with EVALSHA and falls
// back to EVAL on NOSCRIPT (redis.Script.Run).
var (
	//go:embed scripts/finish.lua
	finishSrc string
	// plainFinish is the settle with no Also.
	plainFinish = redis.NewScript("local function also() end\n" + finishSrc)
)

// Finish stores the response of a claimed request for replay. With
// Options.Replicas it fails with ErrNotReplicated when the record is
// stored on the primary but not confirmed on enough replicas.
func (s *Store) Finish(ctx context.Context, c *Claim, resp Response) error {
	val, err := json.Marshal(record{Fingerprint: c.fp, Response: &resp})
	if err != nil {
		return err
	}
	return s.settle(ctx, c, string(val))
}

// Abandon drops the claim without storing anything, so the key may be used
// again at once (for answers a retry should not replay and that wrote
// nothing, such as a 503 overloaded). A retaken claim keeps what it was
// told: the run before it may have bought, so the key stays "tried" (as
// after Unknown) and the next retry still looks for that order.
func (s *Store) Abandon(ctx context.Context, c *Claim) error {
	if c.retaken {
		return s.Unknown(ctx, c)
	}
	return s.settle(ctx, c, "")
}

// Unknown settles a claim whose request ended without knowing its outcome
// (a timeout: the write may have committed after all). Nothing is replayed;
// the next request with the key runs with Claim.Retaken set, so it can look
// for what the earlier one did instead of deciding afresh.
func (s *Store) Unknown(ctx context.Context, c *Claim) error {
	return s.settle(ctx, c, s.tried(c))
}

// tried is the record of a claim whose outcome is unknown.
func (s *Store) tried(c *Claim) string {
	val, _ := json.Marshal(record{Fingerprint: c.fp, Tried: true}) // cannot fail: strings and a bool
	return string(val)
}

func (s *Store) settle(ctx context.Context, c *Claim, val string) error {
	return s.run(ctx, c, val, s.opts.Replicas > 0)
}

// run settles c with val ("" deletes the record), and with wait confirms
// it on Options.Replicas replicas.
func (s *Store) run(ctx context.Context, c *Claim, val string, wait bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second+s.opts.ReplicaWait)
	defer cancel()
	script := plainFinish
	if c.also.Src != "" {
		v, ok := s.settles.Load(c.also.Src)
		if !ok {
			v, _ = s.settles.LoadOrStore(c.also.Src, redis.NewScript(c.also.Src+"\n"+finishSrc))
		}
		script = v.(*redis.Script)
	}
	keys := append([]string{c.key}, c.also.Keys...)
	args := append([]any{c.token, val, s.opts.Retention.Milliseconds()}, c.also.Args...)
	if !wait {
		if err := script.Run(ctx, s.rdb, keys, args...).Err(); err != nil {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return nil
	}
	_, w, err := s.runAndWait(ctx, script, keys, args)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return w.short(s.opts)
}

// beginAndWait runs a claim's script with WAIT behind it (runAndWait), and
// returns its reply and what WAIT said of it.
func (s *Store) beginAndWait(ctx context.Context, script *redis.Script, keys []string, args []any) ([]string, waited, error) {
	cmd, w, err := s.runAndWait(ctx, script, keys, args)
	if err != nil {
		return nil, waited{}, err
	}
	res, err := cmd.StringSlice()
	return res, w, err
}

// waited is what WAIT said of a script's writes: how many replicas
// confirmed them, or why its answer did not come back (err), in which
// case none did, as far as anyone knows. The script's own reply came back
// either way, so its caller knows what the script did: a claim that ran
// then is given back, not left in flight with its buyer told that
// nothing ran.
type waited struct {
	n   int64
	err error
}

// short is ErrNotReplicated when fewer than o.Replicas confirmed, else
// nil. The cause of a lost answer is kept as text only: a deadline that
// fell while WAIT waited must not read as a call never sent.
func (w waited) short(o Options) error {
	switch {
	case w.err != nil:
		return fmt.Errorf("%w: WAIT for %d replicas did not answer: %v", ErrNotReplicated, o.Replicas, w.err)
	case w.n < int64(o.Replicas):
		return fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, w.n, o.Replicas, o.ReplicaWait)
	}
	return nil
}

// unconfirmed gives up claim c, which the primary granted but fewer than
// Options.Replicas replicas confirmed: a failover now could lose it while
// its request bought, and the retry would then find the key unused and
// decide afresh. The request does not run. A claim whose Refusal took a
// first step (its Reply) may have taken units: that is left to the caller,
// as for a claim's lost reply (a *ScriptError with the Claim, to settle
// with Unknown); any other is given back (a retaken one stays "tried",
// and says so with ErrTried: the run before it may have bought).
func (s *Store) unconfirmed(ctx context.Context, c *Claim, short error) error {
	err := fmt.Errorf("the claim: %w", short)
	if c.reply != "" {
		return &ScriptError{Claim: c, err: err}
	}
	// Given back without a wait: the replica that did not confirm the
	// claim would not confirm this either, and a primary that keeps the
	// claim only makes a retry wait out its lease.
	val := ""
	if c.retaken {
		val = s.tried(c)
		err = fmt.Errorf("%w (%w)", err, ErrTried)
	}
	if aerr := s.run(ctx, c, val, false); aerr != nil {
		// Its lease runs out instead; the next claim then looks for what
		// this request did, which is nothing.
		err = fmt.Errorf("%w (giving the claim back failed: %v)", err, aerr)
	}
	return fmt.Errorf("%w: nothing ran: %w", ErrUnavailable, err)
}

// runAndWait runs script with WAIT pipelined behind it on the same
// connection, and returns the script's reply and what WAIT said of it:
// WAIT counts the replicas that acknowledged its connection's writes, so
// both must go down one connection. On a Cluster that is a connection to
// the master of the record's slot (KEYS[1]): the cluster client would
// send a keyless WAIT to any node. A server that does not have the
// script yet (a restart, a new primary) gets it whole, once; a MOVED
// makes the cluster client reread its slot map, for the next call. It
// fails only when the script did; a WAIT whose answer did not come back
// after the script's did (the request's deadline fell while it waited
// for a lagging replica) is a waited with its err.
func (s *Store) runAndWait(ctx context.Context, script *redis.Script, keys []string, args []any) (*redis.Cmd, waited, error) {
	var node interface{ Pipeline() redis.Pipeliner } = s.rdb
	cc, cluster := s.rdb.(*redis.ClusterClient)
	if cluster {
		m, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, waited{}, err
		}
		node = m
	}
	send := func(run func(context.Context, redis.Scripter, []string, ...any) *redis.Cmd) (*redis.Cmd, waited, error) {
		pipe := node.Pipeline()
		res := run(ctx, pipe, keys, args...)
		wait := pipe.Do(ctx, "WAIT", s.opts.Replicas, s.opts.ReplicaWait.Milliseconds())
		_, _ = pipe.Exec(ctx) // each command's own error is read below
		n, werr := wait.Int64()
		if err := res.Err(); err != nil {
			// go-redis stamps a read's failure on every command of the
			// pipeline, those whose replies it had read too: a script
			// whose reply came back has its value.
			if werr == nil || res.Val() == nil {
				return nil, waited{}, err
			}
			res = redis.NewCmdResult(res.Val(), nil)
		}
		return res, waited{n: n, err: werr}, nil
	}
	res, w, err := send(script.EvalSha)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		res, w, err = send(script.Eval)
	}
	if cluster && err != nil && redis.HasErrorPrefix(err, "MOVED") {
		// The slot has moved (a resharding, a failover): the script ran
		// nowhere. The cluster client rereads its map on a MOVED it gets
		// itself, not on one its node's connection got.
		cc.ReloadState(ctx)
	}
	return res, w, err
}

// recordKey hashes the scope so that user ids and keys with any characters
// cannot collide or spill across keys.
func (s *Store) recordKey(user, route, key string) string {
	// Each part as "<length>:<part>;", so no two triples hash the same
	// input. Records outlive deploys: the bytes hashed must not change.
	b := make([]byte, 0, len(user)+len(route)+len(key)+3*8)
	for _, part := range [...]string{user, route, key} {
		b = append(append(append(strconv.AppendInt(b, int64(len(part)), 10), ':'), part...), ';')
	}
	sum := sha256.Sum256(b)
	return s.opts.Prefix + hex.EncodeToString(sum[:])
}

func newToken() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b[:])
}
