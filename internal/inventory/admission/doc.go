// Package admission is the crowd control in front of the safe stages: it
// decides, before a buyer reaches a stage's lock, row or script, whether
// the buyer gets there at all, and it never changes which buyers get a
// unit. Its gates, in order: the sale window remembered, the sell-out
// remembered (under the fleet's restock epochs, RedisEpochs), the rate
// limit (CrowdOptions.Admit), the opening draw (Draw), and the line with
// its door. crowd.go says why each is there. A sell-out one instance
// learns is announced to the fleet (pushed.go, epochs_soldout.go); a keyed
// buy whose claim takes its units passes the limit and the draw before
// its claim (gates.go).
//
// A stage tells the crowd what it learnt through package inventory's
// stage contract: its answers, and the last unit it sold
// (inventory.LastUnitSeller). The teaching stages (unlocked, local-mutex)
// are not wrapped: their race is the lesson.
package admission
