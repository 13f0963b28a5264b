package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
)

// replayHeaders are stored with a response and sent again on replay.
var replayHeaders = []string{"Content-Type", api.StageHeader, api.InstanceHeader, "Retry-After", "Location"}

// refusalCheckFunc returns the refusal check of a request for the claim of
// its key (see idempotency.Refusal); the zero Refusal when it has none. A
// check that also takes the buy's units comes with its Fold.
type refusalCheckFunc func(c *gin.Context, store *idempotency.Store) (idempotency.Refusal, *inventory.Fold, refusedFunc)

// refusedFunc is the error of a request its check refused, for the
// refusal the claim's script answered.
type refusedFunc func(refusal string) error

// idempotent runs a buy, grab or payment at most once per Idempotency-Key,
// in three steps: claim the key (or find its stored answer), replay a
// stored answer byte for byte with Idempotent-Replayed: true, or run the
// request and settle the key by what it answered (see keyRule). With
// check, a request that would be refused is answered in the claim's own
// round trip (see refusalCheck).
func (s *server) idempotent(store *idempotency.Store, require bool, check refusalCheckFunc) gin.HandlerFunc {
	return func(c *gin.Context) {
		header := c.GetHeader("Idempotency-Key")
		if header == "" {
			if require {
				s.writeError(c, errIdemMissing)
			}
			return
		}
		key, err := idempotency.ParseKey(header)
		if err != nil {
			s.writeError(c, err)
			return
		}
		if store == nil {
			return // no Redis on this instance: keys cannot be honoured, see Deps
		}
		if in := buyOf(c); in != nil && in.stageErr != nil {
			// Refused for its stage header (the admin token, the stage's
			// name): nothing ran, and the header is not in the key's
			// fingerprint, so the answer must not be stored under the
			// key, or the retry that fixed the header would hear it
			// again. The handler answers it.
			return
		}
		if s.answeredFromMemory(c, store, key) {
			return
		}
		claim, stored, fold, ok := s.claimKey(c, store, key, check)
		if !ok {
			return
		}
		if stored != nil {
			s.replay(c, stored)
			return
		}
		s.runAndSettle(c, store, claim, fold)
	}
}

// answeredFromMemory answers a keyed buy of an item this instance
// remembers as sold out (or outside its sale window) with that answer, in
// one plain read and no claim, when its key was never used: a refusal
// stores nothing, so the key stays free for a buy after a restock, as a
// refusal in the claim's script leaves it. A used key (a stored answer to
// replay, a claim in flight or left unknown) goes on to its claim, and so
// does any buy whose read failed.
//
// The answer is what memory says after the read, not before it: the read
// is a round trip, long enough for a reset to come and return meanwhile
// (and for the epoch read before it to outlive its lease), and a buyer
// answered after a reset must not hear what the reset dropped. Memory is
// read again at no cost (the epoch is remembered); the claim's script this
// answer stands for would have read the stock as it is then.
func (s *server) answeredFromMemory(c *gin.Context, store *idempotency.Store, key string) bool {
	in := buyOf(c)
	if in == nil || in.keyedMemory == nil {
		return false
	}
	ctx := c.Request.Context()
	used, err := store.Used(ctx, in.req.UserID, c.Request.URL.Path, key)
	if err != nil || used {
		return false
	}
	count, remembered := in.svc.PeekMemory(ctx, in.stage, in.req.ItemID)
	if remembered == nil {
		return false
	}
	count()
	s.writeError(c, remembered)
	return true
}

// claimKey claims key for this request, or finds the answer stored under
// it. It answers the request itself, and returns false, when the key
// cannot be claimed: the body is unreadable, the check refused the buy, or
// the key is in flight, mismatched or unreachable. A claim whose check
// took the buy's units comes with its Fold, which the buy is handed.
func (s *server) claimKey(c *gin.Context, store *idempotency.Store, key string, check refusalCheckFunc) (*idempotency.Claim, *idempotency.Response, *inventory.Fold, bool) {
	body, user, err := s.keyedBody(c)
	if err != nil {
		s.writeError(c, err)
		return nil, nil, nil, false
	}
	path := c.Request.URL.Path
	fp := idempotency.Fingerprint(c.Request.Method, path, body)
	var refusal idempotency.Refusal
	var fold *inventory.Fold
	refused := refusedFunc(inventory.RefusalError)
	if check != nil {
		refusal, fold, refused = check(c, store)
	}
	ctx := c.Request.Context()
	claim, stored, err := store.BeginChecked(ctx, user, path, key, fp, refusal)
	var refusedErr *idempotency.RefusedError
	var failed *idempotency.ScriptError
	switch {
	case errors.As(err, &refusedErr):
		err = refused(refusedErr.Reason)
	case errors.Is(err, idempotency.ErrTried):
		// The claim was given back without running, but the run before
		// it may have bought: "nothing was written" would be untrue of
		// the buyer's key.
		err = fmt.Errorf("%w: %w", inventory.ErrOutcomeUnknown, err)
	case fold != nil && errors.As(err, &failed):
		// The claim may have taken the units, and the key: a retry must
		// look for what it did, not wait out the claim's lease.
		lost := failed.Claim
		s.settleWithin(ctx, unknownFailed, func() error { return store.Unknown(ctx, lost) })
		err = fold.ClaimFailed(err)
	case err == nil && claim != nil && fold != nil:
		if err = fold.Took(claim.Reply()); err != nil {
			s.settleWithin(ctx, unknownFailed, func() error { return store.Unknown(ctx, claim) })
			break
		}
		if in := buyOf(c); in != nil {
			in.fold = fold // handed to the buy (Service.BuyFolded)
		}
	}
	if err != nil {
		s.writeError(c, err)
		return nil, nil, nil, false
	}
	return claim, stored, fold, true
}

// keyedBody returns the body a key's fingerprint covers and the user its
// record is scoped by: a buy's as readBuy read it; another route's read
// here, and put back for its handler. A body of the wrong Content-Type is
// refused here, before any claim: the header is not in the fingerprint,
// so a 415 stored under the key would be replayed to the retry that fixed
// it (and a buy's body is not even decoded, so its user is unknown).
func (s *server) keyedBody(c *gin.Context) ([]byte, string, error) {
	if in := buyOf(c); in != nil {
		if errors.Is(in.reqErr, errMediaType) {
			return nil, "", in.reqErr
		}
		return in.body, in.req.UserID, in.bodyErr
	}
	body, err := readBody(c)
	if err != nil {
		return nil, "", err
	}
	if len(body) > 0 {
		// A payment's body is optional (handlePay): only one sent is typed.
		if err := checkMediaType(c); err != nil {
			return nil, "", err
		}
	}
	c.Request.Body = io.NopCloser(bytes.NewReader(body))
	return body, userOf(body), nil
}

// replay answers a stored response again.
func (s *server) replay(c *gin.Context, stored *idempotency.Response) {
	for k, v := range stored.Header {
		c.Header(k, v)
	}
	c.Header("Cache-Control", "no-store")
	c.Header("Idempotent-Replayed", "true")
	c.Status(stored.Status)
	if _, err := c.Writer.Write(stored.Body); err != nil {
		s.log.Debug("writing replay failed", "err", err)
	}
	c.Abort()
}

// runAndSettle runs the request under claim and settles the key by the
// answer's keyRule; the settle also confirms what the buy's fold left it
// to confirm.
func (s *server) runAndSettle(c *gin.Context, store *idempotency.Store, claim *idempotency.Claim, fold *inventory.Fold) {
	if claim.Retaken() {
		// An earlier run with this key was cut off (a crash, a timeout):
		// it may have bought, and the service answers with that order
		// rather than deciding afresh.
		c.Request = c.Request.WithContext(inventory.WithRetry(c.Request.Context()))
	}
	w := &capturingWriter{ResponseWriter: c.Writer, hold: store.Replicated()}
	c.Writer = w
	var before http.Header
	if w.hold {
		before = w.Header().Clone()
	}
	defer func() {
		// A panic unwinds past this middleware to the recoverer, which
		// answers 5xx: the run may have bought, and the key must not wait
		// out its lease as if still in flight.
		if rec := recover(); rec != nil {
			w.hold = false // the recoverer's answer goes out as written
			if err := store.Unknown(c.Request.Context(), claim); err != nil {
				s.log.Warn("marking the outcome unknown of an idempotency claim failed; its lease runs out instead", "err", err)
			}
			panic(rec)
		}
	}()
	c.Next()
	if fold != nil {
		if src, keys, args, ok := fold.Confirm(); ok {
			claim.Also(idempotency.Also{Src: src, Keys: keys, Args: args})
		}
	}

	ctx := c.Request.Context()
	var settle func() error
	how := ""
	switch answerKeyRule(c, w.Status()) {
	case keyStore:
		resp := idempotency.Response{Status: w.Status(), Header: map[string]string{}, Body: w.buf.Bytes()}
		for _, h := range replayHeaders {
			if v := w.Header().Get(h); v != "" {
				resp.Header[h] = v
			}
		}
		if w.hold {
			// The answer is told only once its record is confirmed.
			if err := store.Finish(ctx, claim, resp); err != nil {
				// The answer is not told: a retry after a failover might
				// not find it to replay. Its retry finds what the request
				// did.
				s.log.Warn("storing an idempotent response failed or was not confirmed on a replica; answered outcome-unknown", "err", err)
				w.replace(before)
				s.writeError(c, fmt.Errorf("%w: %w", inventory.ErrOutcomeUnknown, err))
			}
			s.release(w)
			return
		}
		settle, how = func() error { return store.Finish(ctx, claim, resp) }, "storing an idempotent response failed; a retry will run again and be refused as a repeat"
	case keyLetGo:
		settle, how = func() error { return store.Abandon(ctx, claim) }, "abandoning an idempotency claim failed; its lease runs out instead"
	case keyUnknown:
		settle, how = func() error { return store.Unknown(ctx, claim) }, unknownFailed
	}
	if settle != nil {
		if w.hold {
			// A held answer waits for its settle, as before.
			if err := settle(); err != nil {
				s.log.Warn(how, "err", err)
			}
		} else {
			s.settleWithin(ctx, how, settle)
		}
	}
	s.release(w)
}

const unknownFailed = "marking the outcome unknown of an idempotency claim failed; its lease runs out instead"

// settleWithin runs settle, a key's settle, and has the answer wait for
// it no longer than inventory.Within allows (a quarter of a second past
// the request's end): a Redis that stopped answering must not hold a
// buy's answer past its deadline for the settle's own 2 s. The settle then
// goes on in the background, the key claimed meanwhile, so a retry hears
// 409 idempotency-in-flight, never a decision made afresh.
func (s *server) settleWithin(ctx context.Context, how string, settle func() error) {
	logged := func(err error) {
		if err != nil {
			s.log.Warn(how, "err", err)
		}
	}
	if err := inventory.Within(ctx, settle, logged); errors.Is(err, inventory.ErrStillUnderWay) {
		s.log.Debug("a key's settle outlived its request: answered without waiting for it")
	} else {
		logged(err)
	}
}

// release sends the answer w held, if any.
func (s *server) release(w *capturingWriter) {
	if err := w.release(); err != nil {
		s.log.Debug("writing a held answer failed", "err", err)
	}
}

// answerKeyRule is what the answer just given does to its key: the error
// table's rule for a problem (writeError leaves it), keyStore for any
// other answer below 500, keyUnknown above. A retryable answer given after
// the request's deadline passed (or its client left) is keyUnknown: a
// backend call cut off there, such as a Redis script whose reply was lost,
// comes back as "unavailable" although it may have taken effect.
func answerKeyRule(c *gin.Context, status int) keyRule {
	v, _ := c.Get(keyRuleKey)
	rule, ok := v.(keyRule)
	if !ok {
		rule = keyStore
		if status >= http.StatusInternalServerError {
			rule = keyUnknown
		}
	}
	if rule == keyRetry {
		rule = keyLetGo
		if c.Request.Context().Err() != nil {
			rule = keyUnknown
		}
	}
	return rule
}

// userOf reads user_id from a JSON body, or "" when there is none: the
// handler reports bad bodies, this only scopes the record.
func userOf(body []byte) string {
	var b struct {
		UserID string `json:"user_id"`
	}
	if json.Unmarshal(body, &b) != nil {
		return ""
	}
	return b.UserID
}

// capturingWriter keeps a copy of the body written through it. With hold
// it keeps the answer itself until release: a store that waits for
// replicas (Store.Replicated) has its buyer hear the answer only once the
// record that replays it is on one, and may replace it.
type capturingWriter struct {
	gin.ResponseWriter
	buf  bytes.Buffer
	hold bool
}

func (w *capturingWriter) Write(b []byte) (int, error) {
	w.buf.Write(b)
	if w.hold {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

func (w *capturingWriter) WriteString(s string) (int, error) {
	w.buf.WriteString(s)
	if w.hold {
		return len(s), nil
	}
	return w.ResponseWriter.WriteString(s)
}

// WriteHeaderNow sends nothing while the answer is held.
func (w *capturingWriter) WriteHeaderNow() {
	if !w.hold {
		w.ResponseWriter.WriteHeaderNow()
	}
}

// replace drops the held answer, its headers set back to before, so that
// another can be written in its place (and held in turn).
func (w *capturingWriter) replace(before http.Header) {
	h := w.Header()
	clear(h)
	for k, v := range before {
		h[k] = v
	}
	w.buf.Reset()
}

// release sends the held answer.
func (w *capturingWriter) release() error {
	if !w.hold {
		return nil
	}
	w.hold = false
	w.ResponseWriter.WriteHeaderNow()
	if w.buf.Len() == 0 {
		return nil
	}
	_, err := w.ResponseWriter.Write(w.buf.Bytes())
	return err
}

// refusalCheck is the refusal check of a buy or grab at ep: the buy's
// stage checks its Redis copy in the claim's script, when the store keeps
// its records on that same Redis, and takes the units there too where it
// can (a Fold). A request the handler would refuse for other reasons (a
// bad body, an unknown stage) has no check and runs.
//
// A store that waits for replicas (Store.Replicated) gets no Fold, and so
// no check where the stage's is one: its claim must take nothing. A claim
// no replica confirms does not run its buy, and a Fold's units taken in
// it would stay reserved, the buyer listed as one, with no order: its
// retry would hear "already purchased" until the reconcile job gave them
// back.
func (s *server) refusalCheck(ep itemEndpoints) refusalCheckFunc {
	return func(c *gin.Context, store *idempotency.Store) (idempotency.Refusal, *inventory.Fold, refusedFunc) {
		in := buyOf(c)
		if in == nil || in.stageErr != nil || in.reqErr != nil {
			return idempotency.Refusal{}, nil, inventory.RefusalError
		}
		rc, ok := ep.svc.RefusalCheck(c.Request.Context(), in.stage, in.req)
		if !ok || !store.Checks(rc.Client) || rc.Fold != nil && store.Replicated() {
			return idempotency.Refusal{}, nil, inventory.RefusalError
		}
		if rc, ok = rc.PassGates(c.Request.Context()); !ok {
			// The crowd control turned the buyer away before any unit was
			// taken: the key is claimed with no check, and the buy
			// answers what the gate said (inventory.Fold.PassGates).
			in.fold = rc.Fold
			return idempotency.Refusal{}, nil, inventory.RefusalError
		}
		return idempotency.Refusal{Src: rc.Src, Keys: rc.Keys, Args: rc.Args}, rc.Fold, rc.Refused
	}
}
