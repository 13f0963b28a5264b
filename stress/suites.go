package main

import (
	"strings"
	"time"
)

// suite is one go test invocation: the tests of one package that inject a
// fault or race goroutines.
type suite struct {
	pkg string
	// tests are top-level test names; nil runs every test of the package.
	// A listed name that does not run is reported missing.
	tests []string
	// budget is what one run of these tests may take under -race beside the
	// hogs on a busy two-core machine; go test's -timeout is budget × count.
	budget time.Duration
	// run, when set, is the -run of a suite of every test (STRESS_RUN).
	run string
}

// runRegexp is the suite's -run argument.
func (s suite) runRegexp() string {
	switch {
	case s.run != "":
		return s.run
	case s.tests == nil:
		return "^Test"
	}
	return "^(" + strings.Join(s.tests, "|") + ")$"
}

// suites is the one list of what `make stress` runs. When a test that
// injects a fault or races goroutines is added or renamed, change it here;
// a listed name that no longer exists shows as missing and fails the run.
var suites = []suite{{
	// A relay cuts MySQL's connection right after a COMMIT went through,
	// or holds the COMMIT's answer past the deadline; buyers hang up while
	// their sale batch waits inside MySQL, one held there, or a crowd cut
	// at random; a lock holder loses its lease while its write waits, a
	// buyer's unfenced write waits while the buyer leaves, a buyer's
	// COMMIT is still on its way when its request ends, and a reset or a
	// cancel lands inside a holder's section; a relay holds the end of a
	// read's result, or a ROLLBACK's answer, past the deadline; the
	// pool's idle connections killed under lone sales and groups.
	pkg: "./internal/store",
	tests: []string{"TestCommitWhoseAnswerIsLost", "TestSaleDeadlockedOnEveryTryIsOverload", "TestIdleKilledConnectionsCostNoStatement", "TestIdleWindowCountsFromTheReturn", "TestCommitWhoseAnswerNeverComesEndsAtTheDeadline",
		"TestSaleWhoseBuyerLeftWhileItWaited", "TestSalesCutOffAtRandomStayConserved",
		"TestWriteCutOffByALostLockIsNotNothing", "TestCutOffUnfencedWriteDoesNotLandLate", "TestCommitInFlightKeepsTheGuard", "TestBrokenCommitKeepsTheGuard", "TestCloseEndsTheWaitForALateCommit",
		"TestStockWritersOutsideTheLockFenceTheHolderOff", "TestBurstMarksHoldOneBurstPerItem", "TestMarkedAnyAsksOnceAThousandItems",
		"TestReadWhoseRestNeverComesEndsAtTheDeadline", "TestRollbackWhoseAnswerNeverComesEndsAtTheDeadline", "TestPayWhoseReadIsLostIsNotNothingWritten",
		"TestCrossItemGroupsDoNotDeadlock",
		"TestCommitNotSentByTheDeadlineIsATimeout", "TestSaleCutOffBeforeItWasSentHasAKnownOutcome",
		"TestKilledConnectionCostsOneSale", "TestKilledConnectionsCostNoGroup"},
	budget: 2 * time.Minute,
}, {
	// Lost, delayed and racing replies, paused servers and holders, killed
	// instances and subscribers, flash crowds (renewal_test.go,
	// try_cleanup_test.go, redlock_faults_test.go and the rest, with the
	// hooks of faults_test.go), the scripts
	// on miniredis, the pools of RedLock instances under refused dials.
	pkg: "./internal/lock",
	tests: []string{
		"TestRefreshRacingWatchdogNeverOutlivesRedis",
		"TestUnfencedCrowd",
		"TestUnfencedTryOnceLostReplyIsCleanedUp",
		"TestRefreshReplyLostShortensDeadline",
		"TestPausedHolderSeesLossOnResume",
		"TestFencingTokensSurviveClockStepBack",
		"TestFenceRecordOutlivesALongHeldLease",
		"TestObtainCancelledAfterRedisRanItReleases",
		"TestRedLockWakeUpWithInstanceDown",
		"TestRedLockHandoffsWithInstanceDown",
		"TestRedLockWaitsThroughBusyMajority",
		"TestNotifierPausedInstanceBlocksNobody",
		"TestRedLockHotKeyIgnoresSlowInstance",
		"TestReleaseBoundedWhileRenewalHangs",
		"TestOwnerWithSeparator",
		"TestRefreshRacingReleaseIsClean",
		"TestRedLockFlashCrowd",
		"TestWatchdogKeepsLock",
		"TestWatchdogReportsLoss",
		"TestWatchdogRenewalHangs",
		"TestWaitQueueOnOneClient",
		"TestWaitFallbackWhenHolderVanishes",
		"TestWaitSubscriberKilled",
		"TestRedLockWatchdogNeedsMajority",
		"TestRedLockNoDoubleGrantAcrossRestarts",
		"TestRedLockFailsFastWhenMajorityDown",
		"TestRedLockBurstNoLivelock",
		"TestMiniredis",
		"TestScriptsOnAServerWhoseClockRunsInScripts",
		"TestInstanceClientsReturnWithinDeadline",
		"TestLostReplyIsNotAnsweredByARetry",
		"TestPausedRedisLeavesNoOrphan",
		"TestCleanUpOvertakenByItsTry",
		"TestClusterKeysWithBraces",
		"TestRedLockLateGrantAfterRelease",
		"TestRedLockGrantsTooLateAreNotCalledHeld",
		"TestRedLockWakeUpWhenGateDiesAfterAWaiterCame",
		"TestReleaseStopsPublishingOnceNobodyWaits",
		"TestReleaseRacingTheLastWaiterLeaving",
		"TestWaiterPausedPastItsRecord",
		"TestReleaseWhileTheLossIsReported",
		"TestHooks",
		// Replica sync: the replica's process stopped under a grant and
		// a renewal (issue 34).
		"TestReplicaSyncGivesBackAGrantNoReplicaConfirmed",
		"TestReplicaSyncDoesNotTrustAnUnconfirmedRenewal",
		// The fair mode (issue 33): arrival order over three clients, a
		// newcomer against a first in line whose try is held, waiters
		// cancelled, killed (SIGKILL) and paused past their place's lease,
		// a crowd, and the fair scripts on miniredis.
		"TestFairGrantsInArrivalOrder",
		"TestFairNewcomerCannotBarge",
		"TestFairWaiterCancelledLeavesTheLine",
		"TestFairWaiterKilled",
		"TestFairWaiterPausedLosesItsPlace",
		"TestFairCrowd",
		"TestFairKeepsReentryFencingAndWatchdog",
		"TestFairOnMiniredis",
		// Killed instances and a lease that must outlive a refresh
		// (their short timeouts failed under load).
		"TestRedLock",
		"TestRefresh",
		// A reentrant owner's try whose reply is lost or held back past
		// its clean-up, on one Redis (plain and fair) and on RedLock
		// (issue 57).
		"TestReentrantTryOfUnknownOutcomeGivesItsHoldBack",
		"TestRedLockReentrantLateGrant",
	},
	budget: 4 * time.Minute,
}, {
	// The demo's in-process Redis: keys expire on the wall clock, never
	// early, and stand still for the length of one command.
	pkg:    "./internal/embedded",
	budget: time.Minute,
}, {
	// Each classic lock mistake, with the interleaving that breaks it forced.
	pkg:    "./internal/pitfalls",
	budget: 2 * time.Minute,
}, {
	// Crowds released by a barrier, paused lock holders, jobs that race or
	// die midway.
	pkg: "./internal/inventory",
	tests: []string{
		"TestContractNoOversell",
		// A lock's release that gets no answer, at the buyer's deadline.
		"TestReleaseDoesNotHoldTheAnswerPastTheDeadline",
		// A session reloads its copies side by side, and past its commit
		// the request's end does not cut the reloads short.
		"TestSessionReloadsItsItemsSideBySide",
		"TestSessionReloadsEveryCopyOnceCommitted",
		"TestResetReloadsTheCopyOnceCommitted",
		"TestFailedReloadPastTheCommitIsNotNothingWritten",
		"TestReloadsPastTheCommitStillEnd",
		// Before its commit a session drains the queues of all its items
		// together, and waits for each.
		"TestSessionDrainsItsQueuesInExchangesThatDoNotGrowWithItsItems",
		"TestSessionWaitsForTheQueueOfEachOfItsItems",
		// redis-lock's fair mode on three instances: buyers forced to
		// arrive one by one win in that order.
		"TestRedisLockFairSellsToTheFirstComers",
		"TestFencingRejectsPausedHolder",
		"TestSameTokenTwiceClaimsOnce",
		"TestWithoutFencingThePausedHolderOversells",
		"TestLostLeaseStopsTheSection",
		"TestLostLeaseCancelsTheSectionContext",
		"TestReconcileRepairDuringCancelLosesNoUnit",
		"TestTwoCancelJobsRaceUnitsReturnOnce",
		"TestCancelJobCrashMidwayUnitsReturnOnce",
		// The sale window on instances whose clocks are off, and where
		// the window and a remembered sell-out meet.
		"TestWindowOnTheReferenceClock",
		"TestWindowPrecedence",
		"TestEarlyCrowdSellsNothing",
		"TestSQLStagesDecideByTheDatabaseClock",
		"TestRedisStagesDecideByRedisTime",
	},
	budget: 4 * time.Minute,
}, {
	// Crowd control: crowds at the line and its door released by a
	// barrier, the opening draw's holds, sell-outs remembered across
	// resets, restocks and a Redis restarted from an older snapshot.
	pkg: "./internal/inventory/admission",
	tests: []string{
		"TestDrawPlacesTheOpeningByTheStagesOwnClock",
		"TestDrawReadsTheOpeningOnceForTheCrowdAfterAReset",
		"TestCrowdSellOutSeenDuringResetIsNotRemembered",
		"TestCrowdAdmission",
		"TestCrowdCountsRefusalsByReason",
		"TestBusyBuyerIsToldHowLongOneSpendsInside",
		"TestCrowdLineGrowsWhileItIsServedInTime",
		"TestCrowdDoorClosesWhenNobodyLeaves",
		"TestCrowdDoorLearnsTheSellOut",
		"TestCrowdDoorLetsInWhenThePaceIsKnown",
		"TestCrowdLineGrowsWhenBuyersLeaveQuickly",
		"TestCrowdDoorBuyersJoinAfterTheLastLeftTheDoor",
		"TestCrowdDoorBuyersKeepThePaceWhenTheLineEmpties",
		"TestCrowdAdmitsAfterTheMemoryBeforeTheLine",
		"TestFoldedBuyPassesAFullLine",
		// Sell-outs announced to the fleet: heard, stale, then reset.
		"TestSellOutIsHeardByTheFleet",
		"TestStaleSellOutIsIgnored",
		"TestResetAfterSellOutReopensEveryInstance",
		"TestSellOutIsPassedOnUnderTheEpochItWasComparedWith",
		"TestKeyedRefusalIsHeardByTheFleet",
		"TestRepairedUnitsSellAfterAFailedBump",
		"TestARepairThatTakesUnitsAwayKeepsTheSellOut",
		"TestCrowdRemembersTheWindowOnlyAsLongAsTheReferenceSaid",
		"TestCrowdMemoryEndsByAMillisecondClock",
		"TestDrawHoldsTheOpeningsBuyersForARandomPlace",
		"TestDrawOrderIsIndependentOfArrival",
		"TestDrawBuyerWhoLeavesWhileHeldIsNotServed",
		"TestDrawHeldBuyerJudgedByTheEpochOfItsRelease",
		"TestDrawSlowReferenceReadLetsNobodySkip",
		"TestLastUnitSoldIsRemembered",
		"TestResetWaitsOutTheLease",
		"TestRememberedSellOutOutlivesARedisRestartFromASnapshot",
		"TestEpochReadAfterAnUnnoticedRestartEndsRememberedSellOuts",
		"TestDropIdleBesideABuyerOfTheSameItem",
		"TestItemBackFromIdleIsAFreshItem",
		"TestWatchResubscribesAtOnceAfterALostSubscription",
		"TestWatchBacksOffWhileTheSubscriptionIsRefused",
		"TestCrowdLetsPassHoldersPastTheCap",
		"TestDrawDoesNotHoldPassHolders",
	},
	budget: 3 * time.Minute,
}, {
	// The Redis stages: confirms off the buyer's path and reservation
	// scripts gathered, with pipelines held, failed and cancelled; group
	// commits with writes held, lingers held and failures injected, redis-stream's writers killed mid-batch and durability
	// against a stopped replica, redis-sharded's buckets, sweeper and
	// Cluster masters killed mid-burst, retries and repairs that race.
	pkg: "./internal/inventory/redisstage",
	tests: []string{
		"TestStreamBuyPastItsContextSendsNothingAndSaysSo",
		"TestStreamClaimPastItsContextSendsNothingAndSaysSo",
		"TestKeylessSaleIsOneRoundTripOnTheBuyersPath",
		"TestConfirmsOfConcurrentSalesLeaveTogether",
		"TestLostConfirmIsKeptByTheReconcile",
		"TestReservesWaitingBehindTwoLeaveInOnePipeline",
		"TestOneScriptsErrorInABatchIsItsBuyersAlone",
		"TestBuyerLeavingBeforeItsBatchLeftTakesNothing",
		"TestBuyerCancelledInItsBatchLearnsTheTruth",
		"TestBatchOnStaleConnectionsCostsNoBuyer",
		"TestGroupAttackLoneSalesAreWrittenAlone",
		"TestGroupAttackRepeatBuyerInGroup",
		"TestGroupAttackCaseFoldedTwinsInOneGroup",
		"TestGroupAttackInjectedGroupErrors",
		"TestGroupAttackCancelAroundTheTake",
		"TestGroupAttackWrongCopyRefusesTheGroup",
		"TestGroupAttackCrowdReleasedInBatches",
		"TestGroupAttackHammerWithFailures",
		"TestRedisAtomicCrowdCommitsInGroups",
		"TestSalesBehindAWriteShareOneTransaction",
		"TestRefusedGroupWritesEachSaleAlone",
		"TestGroupThatMayPassFailsEveryMember",
		"TestWaitingSaleLeavesWhenItsRequestEnds",
		"TestTakenSaleWaitsForItsAnswer",
		"TestGroupDoesNotLingerByDefault",
		"TestLoneSaleDoesNotLinger",
		"TestSalesBehindAWriteLingerForTheNextOnItsWay",
		"TestLingerEndsWhenTheGroupIsFull",
		"TestLingerEndsAtItsCap",
		"TestSaleLeavesDuringTheLinger",
		"TestRepairLeavesACopyResetDuringItsRead",
		"TestAttackRetryNeverBuysTwice",
		"TestRetryOfAQueuedBuyGetsThePendingOrder",
		"TestWriterKilledMidBatchEveryOrderConfirmedOnce",
		"TestAuditNeverShowsTheQueueDrainedEarly",
		"TestStreamReplicaDurabilityAcceptsOnlyWhatAReplicaHas",
		"TestStreamReplicaDurabilityAfterScriptFlush",
		"TestRedisLockStageAnswersAnUnreplicatedGrantUnavailable",
		"TestShardedBuyersFallBackUntilEveryBucketIsEmpty",
		"TestShardedSoldOutWaitsForUnitsInFlight",
		"TestShardedRepeatBuyerGivesTheUnitBack",
		// A give-back that Redis does not answer, at the buyer's deadline.
		"TestShardedGiveBackDoesNotHoldTheAnswerPastTheDeadline",
		"TestAtomicGiveBackDoesNotHoldTheAnswerPastTheDeadline",
		"TestRedisAtomicLogsTheUnitsItGivesBack",
		"TestShardedLateLoaderSplitsTheFirstTotal",
		"TestShardedExactSaleOnARedisCluster",
		"TestShardedCancelledUnitsComeBackThroughTheRepair",
		"TestShardedRepairLeavesABusyItemAlone",
		"TestShardedMoveCutBetweenItsHalves",
		"TestShardedMoveFinishedTwiceAtOnce",
		"TestShardedRefusalWaitsForAMoveBehindTheWalk",
		"TestShardedSweeperGathersWhatAnotherInstanceSold",
		"TestShardedMarkWrittenDuringASweepOutlivesItsClear",
		"TestShardedSweeperGathersAnItemWhoseMarkFailed",
		"TestShardedRestockedItemIsSwept",
		"TestFirstBuyersOfAnUnloadedItemLoadItOnce",
		"TestFirstLoadOvertakenByAResetKeepsTheResetsCopy",
		"TestFirstBuyAfterALostCopyAnnouncesARestock",
		"TestFirstLoaderWhoLeavesDoesNotFailTheOthers", "TestShardedWaiterForAnotherLoaderFindsEveryBucket",
		"TestSalesOfTwoItemsShareOneTransaction", "TestShortItemSendsItsGroupAlone", "TestCrossItemGroupThatMayPassFailsEveryMember",
		"TestStreamOrdersOfAnotherInstanceAreWrittenOnARedisCluster",
		"TestShardedCrowdRacesTheSweeper",
		"TestShardedCrowdRacesTheSweeperOnACluster",
		"TestShardedLostReplyOnAMasterThatDies",
		"TestShardedMasterKilledMidBurst",
	},
	budget: 6 * time.Minute,
}, {
	// Runs paused past their lease, late settles, crashed claims.
	pkg: "./internal/idempotency",
	tests: []string{
		"TestLateSettleOfTheOldRunDoesNotTouchTheNewClaim",
		"TestAbandonOfARetakenClaimKeepsItTried",
		"TestRecordsOfThePreviousCode",
		"TestCrashedClaimDoesNotBlockForever",
		"TestLateFinishDoesNotOverwriteANewClaim",
		"TestSettleConfirmedOnAReplica",
		// A record's master killed on a real Cluster, its replica cut off
		// first (cluster_replicas_test.go).
		"TestKeyRecordOnAClusterOutlivesItsMaster",
		// WAIT's answer cut after the script's reply; a give-back held
		// past its lease; a slot moved under a client that rereads hourly.
		"TestWaitAnswerLostAfterTheScript",
		"TestGiveBackSparesTheNextClaim",
		"TestClaimAfterASlotMovedRereadsTheMap",
		// Used's reads gathered behind one in flight (used.go).
		"TestUsedReadsWaitingBehindOneGoInOnePipeline",
		"TestUsedBatchOnStaleConnectionsIsAnswered",
		"TestUsedReaderWhoLeavesWhileWaitingIsNotSent",
		"TestUsedReadsOutliveTheReadAheadOfThem",
		"TestUsedReadThatPanicsLeavesTheQueueIdle",
		"TestUsedPipelineThatFailsAsAWholeIsUnavailable",
		"TestUsedWaitingReadsGoAloneWhenTheReadAheadStalls",
	},
	budget: 4 * time.Minute,
}, {
	// Concurrent duplicates of a key, lost answers, panics after a commit,
	// deadlines that cut a backend call short (or a sale's write on its
	// way to MySQL), a Redis that never answers.
	pkg: "./internal/httpapi",
	tests: []string{
		"TestIdempotencyConcurrentDuplicates",
		// Key records confirmed on a replica that is cut off for the try.
		"TestUnconfirmedClaimOfAFoldTakesNothing",
		"TestUnconfirmedRetakenClaimIsNotNothingWritten",
		"TestKeyedBuyRunsUnderTheStageItWasReadWith",
		"TestIdempotencyAnswersCarryTheBuyHeaders",
		"TestHeaderRefusalIsNotStoredUnderTheKey",
		"TestMediaTypeRefusalIsNotStoredUnderTheKey",
		"TestRetryRefusedOnceStillGetsTheOrder",
		"TestPanicAfterTheCommitDoesNotHoldTheKey",
		"TestLostReplyPastTheDeadlineIsUnknown",
		"TestRetryGetsOnlyItsOwnBuyersOrder",
		"TestCouponGrabRetryGetsTheGrab",
		"TestRetakenKeyWithAnotherBodyIs422",
		"TestCancelledOrderIsNotReturned",
		"TestRetryAfterALostAnswerGetsTheOrder",
		"TestKeySettleDoesNotHoldTheAnswerPastTheDeadline",
		"TestRefusalLostAnswerOfTheLastUnit",
		"TestRefusalDuplicatesWhileTheFirstIsInFlight",
		// The crowd's gates before a claim that takes the units.
		"TestLimitedKeyedBuyTakesNothing",
		"TestRealLimitKeyedBuyTakesNothing",
		"TestRealLimitCountsAHeldBuyerOnArrival",
		"TestRealLimitKeepsItsRoundTripWhereItCannotFold",
		"TestRealLimitOnACluster",
		"TestDrawHoldsAKeyedBuyerBeforeItsClaim",
		"TestRefusalClaimedThenSoldOut",
		"TestRefusalTakeoverRefusedKeepsTried",
		"TestRefusalFoldHoldsItsUnitThroughThePause",
		"TestRefusalFoldedClaimReplyLost",
		"TestRetryOfALostFoldedClaimIsNotAlreadyPurchased",
		"TestRequestDeadline",
		"TestBackendCutShortByTheDeadlineIsNotAnInternalError",
		"TestRedisPing",
		"TestSaleWindowAnswers",
		"TestKeyedBuyOfARememberedSellOutIsOneRead",
		"TestKeyedRefusalTeachesTheMemory",
		"TestKeyedRefusalOfASaleClosingFarAheadIsSoldOut",
		"TestKeyedMemoryAnswerFollowsAResetDuringTheKeyRead",
		"TestKeyedRefusalIsCountedWithoutAnEpoch",
		"TestKeylessBuyRefusedForItsMissingKeyIsNotCountedSoldOut",
		"TestKeyedRefusalAcrossAResetIsNotTrusted",
		"TestKeyedMemoryWhileTheKeysFirstBuyIsInFlight",
		"TestKeyedWindowRefusalTeachesTheMemory",
		"TestKeyedMemoryOnTheDemoAndWithoutAStore",
		"TestKeyedBuySoldOutForNowIsOneRoundTrip",
		"TestWriteThatOutlivedItsDeadlineIsNeverAFailure",
		// A session reads the burst marks of all its items at once, and a
		// burst on one of them refuses it whole.
		"TestSessionReadsTheBurstMarksOnceForAllItsItems",
		"TestBurstOfOneItemRefusesTheWholeSession",
		// The waiting room's pass in front of the buy: replays, a 503.
		"TestBuyWithPass", "TestPassNotSpentByA503", "TestSoldOutRoom", "TestLastSaleIsKnownToTheRoomBeforeItsAnswer",
	},
	budget: 2 * time.Minute,
}, {
	// Fleets of processes: crowds, RedLock servers killed mid-run, payment
	// timeouts, graceful shutdown under load, a row held mid-write.
	pkg: "./cmd/seckill",
	tests: []string{
		"TestDemoRoomAcrossInstances",
		"TestRoomStockIsTheLowerCopy",
		"TestAppRedisClientsNeverRunAScriptTwice",
		"TestAppRedisClientFollowsASentinelFailover",
		"TestRedisRestartCostsOneFailurePerConnection",
		"TestRedisRestartCostsABuyerA503PerConnection",
		"TestRedisBatchClientChecksConnectionsBeforeUse",
		"TestServeAtFsyncNeedsAppendfsyncAlways",
		"TestFleetStages",
		"TestBurstInFlightRefusesASecondBurstAndAResetFleetWide",
		"TestFleetCoupons",
		"TestFleetRedLockFaults",
		"TestFleetRedisStream",
		"TestFleetPaymentTimeout",
		"TestFlashCrowdServe",
		"TestFlashCrowdDemo",
		"TestResetReachesEveryInstance",
		"TestEpochsAnswerFromMemoryUntilAnnounced",
		"TestEpochsDroppedWithTheSubscription",
		"TestSoldOutFromMemoryCostsNoRoundTrip",
		"TestKeyedLateBuyerCostsOneRoundTripInRedisStages",
		"TestEpochReadOnAClusterCountsItsNodesDials",
		"TestDatabaseOutOfConnectionsIsOverload",
		"TestGracefulShutdown",
		"TestDemoRunsAndShutsDown",
		"TestDemoPaymentTimeout",
		"TestStreamMetricsFollowTheQueue",
		"TestOversoldBurstVerdictOutlivesThePaymentWindow",
		"TestStoryAgainstTheDemo",
		"TestStoryStartsTheDemoWhenNoneRuns",
		"TestFleetRateLimit",
		"TestRateLimitSwitchedAtRuntime",
		"TestMetricsMoveWithBuys",
	},
	budget: 8 * time.Minute,
}, {
	// The promoted primary paused while the old one rejoins, empty; a
	// replica's full sync slowed past any fixed wait (35 s at least).
	pkg:    "./internal/testenv",
	tests:  []string{"TestRejoiningPrimaryIsNotPromotedBeforeItSynced", "TestWaitReplicaSyncedFollowsASlowSync"},
	budget: 4 * time.Minute,
}, {
	// A replica's link held back byte for byte while the primary grants a
	// lock and is killed: the failover grants it twice.
	pkg:    "./internal/pitfalls",
	tests:  []string{"TestFailoverLosesLockAndGrantsItTwice"},
	budget: time.Minute,
}, {
	// docker-compose.ha.yml's Redis commands, run here, turned into
	// replicas of a paused primary.
	pkg:    "./deploy",
	tests:  []string{"TestComposeHARedisPromotableOnlyOnceSynced"},
	budget: 2 * time.Minute,
}, {
	// Three jobs try one slot at once, behind a barrier; a job comes for a
	// slot after every key of that slot has expired.
	pkg: "./internal/reconcile",
	// A pass over the items in play while buys land beside it.
	tests: []string{"TestOneRunPerIntervalAcrossTheFleet", "TestLateJobDoesNotRunASlotAgain",
		"TestRunChecksTheItemsInPlayNotTheCatalogue", "TestItemsBoughtWithoutACopyAreCheckedAfterTheirSale",
		"TestQuietCopiesCostAProbeEach", "TestStaleReservationOnAQuietCopyIsSettled", "TestCopyChangedBehindTheJobsBackIsCheckedInFull",
		"TestQuietRunVouchesForEachFinding", "TestQuietCopyWithoutAFindingIsCheckedInFull", "TestQuietCopiesOnACluster",
		"TestLostConfirmOnAQuietCopyIsSettled", "TestUnregisteredCopyInPlayIsAdopted"},
	// Ten tests, each over a 2,000-item catalogue (one starts a Cluster):
	// one run of them took 63 s under -race beside two hogs and a CI run.
	budget: 3 * time.Minute,
}, {
	// redis-stream's writers: an order queued while a writer checks its
	// item's drain, after the item left the set of items with work, and
	// a batch left pending by a writer that died; a write that failed
	// transiently, retried by its own writer (once, six times with
	// backoff) and, from a writer cut off from the database, taken over
	// while it retries.
	pkg: "./internal/inventory/orderwriter",
	tests: []string{"TestOrderQueuedWhileTheWriterChecksItsDrainIsWritten", "TestOrderQueuedAfterItsItemLeftTheWorkSetIsTakenUp",
		"TestEntriesLeftPendingByADeadWriterKeepTheirItemUntilTakenOver",
		"TestOrderWhoseWriteFailedTransientlyIsRetriedByItsWriter", "TestWriterRetriesAFailingDatabaseWithBackoff",
		"TestEntryOfAWriterCutOffFromTheDatabaseIsTakenOverWhileItRetries"},
	budget: 2 * time.Minute,
}, {
	// A baseline whose request is held past its cap.
	pkg:    "./loadtest/baseline",
	tests:  []string{"TestBaselineCappedSaysSo"},
	budget: time.Minute,
}, {
	// The closed model's users against a fake shop that answers only once
	// all of them are in flight.
	pkg:    "./loadtest/scenario",
	tests:  []string{"TestClosedCrowdKeepsItsUsersInFlight", "TestClosedUsersComeBackAfterTheirThinkTime"},
	budget: time.Minute,
}, {
	// The waiting room: admission steps of instances at once, passes
	// spent and given back, an instance restarted, a Redis restarted
	// empty and killed, a Cluster.
	pkg:    "./internal/room",
	budget: 2 * time.Minute,
}, {
	// A dashboard burst's requests released through a barrier against
	// fake instances; its audit asked again after busy answers, and
	// given up at its budget.
	pkg:    "./internal/burst",
	budget: time.Minute,
}, {
	// One limit shared by limiters on separate clients, at once.
	pkg:    "./internal/ratelimit",
	budget: time.Minute,
}, {
	// The lab's crowds against fake shops: the T-0 crowd released through
	// a barrier (and held past its opening), paced arrivals past buyers a
	// shop holds back, scalpers racing ordinary buyers through a limit,
	// a waiting room's crowd joining, polling and buying through fake
	// rooms with one fault each; the baselines' slices in turn, and a
	// baseline whose request is held past its cap.
	pkg: "./loadtest",
	tests: []string{"TestT0AgainstFakeShops", "TestT0RaisesALeadTheEarlyCrowdOverran", "TestPacedAgainstFakeShops", "TestScalperAgainstFakeShops", "TestBaselinesAreSlicedInTurn", "TestInstanceCPULeavesItsOwnReadingOut",
		"TestRoomScenarioAgainstFakeRooms",
		// Another fleet's sale and reset of the item, behind the lab's back.
		"TestForeignWriterSeenThroughItsDeletedOrders"},
	// The waiting room's sound sale sells 30 units one pass holder at a
	// time: beside the hogs under -race, about a minute and a half.
	budget: 3 * time.Minute,
}, {
	// The chaos suite's short form (SECKILL_CHAOS unset): every fault.
	pkg:    "./chaos",
	budget: 8 * time.Minute,
}}
