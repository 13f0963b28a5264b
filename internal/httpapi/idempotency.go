package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
)

// replayHeaders are stored with a response and sent again on replay.
var replayHeaders = []string{"Content-Type", "X-Seckill-Mode", "X-Seckill-Instance", "Retry-After", "Location"}

// refusalCheckFunc returns the refusal check of a request for the claim of
// its key (see idempotency.Refusal); the zero Refusal when it has none.
type refusalCheckFunc func(c *gin.Context, store *idempotency.Store) idempotency.Refusal

// idempotent runs a buy or grab at most once per Idempotency-Key: the first
// request runs and its answer is stored; a retry gets that answer again,
// byte for byte, with Idempotent-Replayed: true. A refusal that took
// nothing (sold out, already purchased) is not stored: a retry runs again.
// With check, a request that would be refused so is answered in the
// claim's own round trip (see refusalCheck).
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
		body, err := io.ReadAll(io.LimitReader(c.Request.Body, MaxBody+1))
		if err != nil {
			s.writeError(c, errors.Join(errMalformed, err))
			return
		}
		if len(body) > MaxBody {
			s.writeError(c, errTooLarge)
			return
		}
		path := c.Request.URL.Path
		fp := idempotency.Fingerprint(c.Request.Method, path, body)
		var refusal idempotency.Refusal
		if check != nil {
			c.Request.Body = io.NopCloser(bytes.NewReader(body))
			refusal = check(c, store)
		}
		c.Request.Body = io.NopCloser(bytes.NewReader(body))
		claim, stored, err := store.BeginChecked(c.Request.Context(), userOf(body), path, key, fp, refusal)
		var refused *idempotency.RefusedError
		if errors.As(err, &refused) {
			s.writeError(c, inventory.RefusalError(refused.Reason))
			return
		}
		if err != nil {
			s.writeError(c, err)
			return
		}
		if stored != nil {
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
			return
		}

		if claim.Retaken() {
			// An earlier run with this key was cut off (a crash, a
			// timeout): it may have bought, and the service answers with
			// that order rather than deciding afresh.
			c.Request = c.Request.WithContext(inventory.WithRetry(c.Request.Context()))
		}
		w := &capturingWriter{ResponseWriter: c.Writer}
		c.Writer = w
		defer func() {
			// A panic unwinds past this middleware to the recoverer,
			// which answers 5xx: the run may have bought, and the key
			// must not wait out its lease as if still in flight.
			if rec := recover(); rec != nil {
				if err := store.Unknown(c.Request.Context(), claim); err != nil {
					s.log.Warn("marking the outcome unknown of an idempotency claim failed; its lease runs out instead", "err", err)
				}
				panic(rec)
			}
		}()
		c.Next()
		status := w.Status()
		if slug := c.GetString(problemKey); slug == "sold-out" || slug == "already-purchased" {
			// A refusal took nothing, so there is nothing for a retry to
			// miss, and a retry after a restock may buy: the key is let
			// go (as the refusal check would have left it), not stored.
			if err := store.Abandon(c.Request.Context(), claim); err != nil {
				s.log.Warn("abandoning an idempotency claim failed; its lease runs out instead", "err", err)
			}
			return
		}
		if status >= 500 || status == http.StatusTooManyRequests || w.Header().Get("Retry-After") != "" {
			// Retryable answers are not replayed: the retry should run.
			// (A 409 order-pending says Retry-After too: the order will
			// be written, and the same key must then pay it.) A timeout
			// or a failure may have written; its retry must know that.
			// So may a run whose deadline passed (or whose client left)
			// whatever it answered: a backend call cut off there, such
			// as a Redis script whose reply was lost, comes back as
			// "unavailable" although it may have taken effect.
			settle, how := store.Abandon, "abandoning"
			if slug := c.GetString(problemKey); slug == "timeout" || slug == "internal" || c.Request.Context().Err() != nil {
				settle, how = store.Unknown, "marking the outcome unknown of"
			}
			if err := settle(c.Request.Context(), claim); err != nil {
				s.log.Warn(how+" an idempotency claim failed; its lease runs out instead", "err", err)
			}
			return
		}
		resp := idempotency.Response{Status: status, Header: map[string]string{}, Body: w.buf.Bytes()}
		for _, h := range replayHeaders {
			if v := w.Header().Get(h); v != "" {
				resp.Header[h] = v
			}
		}
		if err := store.Finish(c.Request.Context(), claim, resp); err != nil {
			s.log.Warn("storing an idempotent response failed; a retry will run again and be refused as a repeat", "err", err)
		}
	}
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

// capturingWriter keeps a copy of the body written through it.
type capturingWriter struct {
	gin.ResponseWriter
	buf bytes.Buffer
}

func (w *capturingWriter) Write(b []byte) (int, error) {
	w.buf.Write(b)
	return w.ResponseWriter.Write(b)
}

func (w *capturingWriter) WriteString(s string) (int, error) {
	w.buf.WriteString(s)
	return w.ResponseWriter.WriteString(s)
}

// refusalCheck is the refusal check of a buy or grab of kind k: the buy's
// stage checks its Redis copy in the claim's script, when the store keeps
// its records on that same Redis. A request the handler would refuse for
// other reasons (a bad body, an unknown stage) has no check and runs.
func (s *server) refusalCheck(k itemKind) refusalCheckFunc {
	return func(c *gin.Context, store *idempotency.Store) idempotency.Refusal {
		stage, err := s.stageFor(c, k.svc)
		if err != nil {
			return idempotency.Refusal{}
		}
		req, err := parseBuy(c, k.coupon)
		if err != nil {
			return idempotency.Refusal{}
		}
		rc, ok := k.svc.RefusalCheck(stage, req)
		if !ok || !store.Checks(rc.Client) {
			return idempotency.Refusal{}
		}
		return idempotency.Refusal{Src: rc.Src, Keys: rc.Keys, Args: rc.Args}
	}
}
