// Package scenario is the lab's load: the scenarios (what each buyer
// sends, to which item, how often), the crowds that send them behind one
// interface (vegeta's attacker in a burst or at a constant rate, the T-0
// crowd, paced arrivals, the scalpers), the reading of every answer into
// a tally, and the figures each crowd keeps of its own (first-come
// fairness, the T-0 window, the scalpers' gain). It reads a Config, never
// a flag.
package scenario
