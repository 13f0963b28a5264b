package inventory

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// A crowd gate that keeps its state in Redis (the fleet-wide rate limit)
// is a round trip of its own in front of the claim. Where the gate's
// Redis is the claim's, and one server, the gate runs in the claim's
// script instead: first, before the folded stage's script takes any unit.
// A buyer it turns away takes nothing and claims no key (a refusal, as
// the stage's check's), and hears the gate's answer. On a Cluster the
// gate's keys are not in the item's slot, and it keeps its round trip.

// ScriptGate is a crowd gate in Lua, for the claim's script: Src defines
// local function gate(keys, args), which answers false to let the buyer
// on, or its refusal, which Refused turns into the buyer's error. It runs
// on Client only.
type ScriptGate struct {
	Client  redis.UniversalClient
	Src     string
	Keys    []string
	Args    []any
	Refused func(refusal string) error
}

// FoldsInto reports whether g can run inside a script sent to c: the same
// client, and one server (not a Cluster, whose slots g's keys ignore).
func (g ScriptGate) FoldsInto(c redis.UniversalClient) bool {
	_, single := c.(*redis.Client)
	return single && g.Client == c
}

// gatedSrc wraps a check's refuse: the gate's keys and args come after
// the check's, and the last two args count them. The gate runs first; its
// refusal is the check's, marked 'gate:'.
const gatedSrc = `
local checked = refuse
local function refuse(keys, args)
  local nk, na = tonumber(args[#args - 1]), tonumber(args[#args])
  local ck, ca = #keys - nk, #args - 2 - na
  local no = gate({unpack(keys, ck + 1, ck + nk)}, {unpack(args, ca + 1, ca + na)})
  if no then return 'gate:' .. no end
  return checked({unpack(keys, 1, ck)}, {unpack(args, 1, ca)})
end
`

// gatePrefix marks a gate's refusal in the claim's reply.
const gatePrefix = "gate:"

// PassGates passes the gates the crowd control set on rc's Fold (see
// Fold.PassGates), and returns the check the claim must send: rc, or rc
// with a gate left to its script run first. false: a gate turned the
// buyer away (the claim must take nothing).
func (rc RefusalCheck) PassGates(ctx context.Context) (RefusalCheck, bool) {
	if rc.Fold == nil {
		return rc, true
	}
	g, ok := rc.Fold.PassGates(ctx)
	if !ok || g == nil {
		return rc, ok
	}
	rc.Src = g.Src + "\n" + rc.Src + gatedSrc
	rc.Keys = append(slices.Clip(rc.Keys), g.Keys...)
	args := append(slices.Clip(rc.Args), g.Args...)
	rc.Args = append(args, strconv.Itoa(len(g.Keys)), strconv.Itoa(len(g.Args)))
	rc.gate = g.Refused
	return rc, true
}

// gateRefused is the error of a buy the gate in rc's script turned away,
// or nil when refusal is not the gate's.
func (rc RefusalCheck) gateRefused(refusal string) error {
	r, ok := strings.CutPrefix(refusal, gatePrefix)
	if !ok || rc.gate == nil {
		return nil
	}
	return rc.gate(r)
}
