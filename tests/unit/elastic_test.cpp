// Elastic DiLoCo's pure parts: the store's reads, the views in the store, the sample queue
// that hands out an epoch's samples to whoever is live, the coordinator's decisions from
// what it observed, a joiner's wait on the views, and the fault plans tests script.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <map>
#include <numeric>
#include <set>
#include <thread>

#include "dtrain/comm/error.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/kv_store.h"
#include "dtrain/data/sample_queue.h"
#include "dtrain/elastic/coordinator.h"
#include "dtrain/elastic/fault_plan.h"
#include "dtrain/elastic/membership.h"
#include "dtrain/elastic/view.h"

namespace dtrain {
namespace {

using namespace std::chrono_literals;

// try_get reads in one compare-and-set: it must tell an unset key from every value (the
// empty one too) and leave the store as it was, on a TCP store as on the in-memory one.
TEST(KeyValueStoreTest, TryGetTellsAnUnsetKeyFromEveryValueAndChangesNothing) {
  auto hosted = comm::KeyValueStore::host("127.0.0.1", 0, 10s);
  auto client = hosted->another_client();
  auto in_memory = comm::KeyValueStore::in_memory(10s);
  for (comm::KeyValueStore* store : {client.get(), in_memory.get()}) {
    EXPECT_FALSE(store->try_get("unset").has_value());
    EXPECT_FALSE(store->try_get("unset").has_value());
    EXPECT_EQ(store->compare_set("unset", "", "first"), "first");  // still unset before
    store->set("empty", "");
    EXPECT_EQ(store->try_get("empty"), std::optional<std::string>(""));
    store->set("text", "view 7");
    EXPECT_EQ(store->try_get("text"), std::optional<std::string>("view 7"));
    const std::string binary("\0a\0b", 4);
    store->set("binary", binary);
    EXPECT_EQ(store->try_get("binary"), std::optional<std::string>(binary));
    EXPECT_EQ(store->get("text"), "view 7");
    EXPECT_EQ(store->add("counter", 2), 2);
    EXPECT_EQ(store->try_get("counter"), std::optional<std::string>("2"));
  }
}

TEST(ElasticViewTest, RoundTripsThroughTheStoreAndRejectsMalformedText) {
  elastic::View v;
  v.id = 4;
  v.members = {0, 2, 1005};
  v.reason = "lost [1]; joined [1005]";
  v.published_at = 1.7e9;
  v.silent_s = {{1, 1.08}};
  const elastic::View back = elastic::View::from_json(v.to_json());
  EXPECT_EQ(back.id, 4);
  EXPECT_EQ(back.members, v.members);
  EXPECT_EQ(back.reason, v.reason);
  EXPECT_DOUBLE_EQ(back.silent_s.at(1), 1.08);
  EXPECT_EQ(back.rank_of(1005), 2);
  EXPECT_EQ(back.rank_of(1), -1);
  EXPECT_THROW(elastic::View::from_json("{\"view\": 2}"), std::invalid_argument);
  EXPECT_THROW(elastic::View::from_json("not json"), std::invalid_argument);
  EXPECT_THROW(elastic::View::from_json("{\"view\": 2, \"members\": [1, 1]}"),
               std::invalid_argument);
  EXPECT_THROW(elastic::View::from_json("{\"view\": 0, \"members\": []}"), std::invalid_argument);
  elastic::View before;
  before.members = {0, 1, 2};
  EXPECT_EQ(elastic::arrived(before, v), (std::vector<int64_t>{1005}));
  EXPECT_EQ(elastic::departed(before, v), (std::vector<int64_t>{1}));
}

// Every position of an epoch handed out once, whatever the replicas per round and the
// positions of lost replicas given back.
TEST(SampleQueueTest, EveryPositionOfAnEpochCountsOnceThroughLossesAndJoins) {
  const int64_t n = 1000, per = 64;
  data::SampleQueue q;
  std::multiset<int64_t> counted;
  const std::vector<int> replicas_by_round = {3, 3, 2, 2, 3, 1, 4, 4, 4, 4, 4, 4};
  size_t round = 0;
  while (!data::epoch_done(q, n)) {
    const int p = replicas_by_round[std::min(round, replicas_by_round.size() - 1)];
    const auto shares = data::assign_round(q, p, per, n);
    ASSERT_EQ(shares.size(), static_cast<size_t>(p));
    size_t most = 0, least = SIZE_MAX;
    for (const auto& s : shares) {
      most = std::max(most, s.size());
      least = std::min(least, s.size());
    }
    EXPECT_LE(2 * most, static_cast<size_t>(3 * per + 1));  // an epoch's last: 1.5 rounds
    for (int r = 0; r < p; ++r) {
      const auto& share = shares[static_cast<size_t>(r)];
      if (round % 3 == 1 && r == 0)  // replica 0 is lost every third round
        data::requeue(q, share);
      else
        counted.insert(share.begin(), share.end());
    }
    ++round;
    ASSERT_LT(round, 100u);
  }
  EXPECT_EQ(counted.size(), static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(counted.count(i), 1u) << i;
}

// An epoch's remainder shorter than half a round joins its last round: 1,000 positions in
// rounds of 3 x 64 are four full rounds and one of 232, not five and one of 40.
TEST(SampleQueueTest, NoRoundIsShorterThanHalfARound) {
  data::SampleQueue q;
  std::vector<size_t> rounds;
  while (!data::epoch_done(q, 1000)) {
    size_t total = 0;
    for (const auto& share : data::assign_round(q, 3, 64, 1000))
      total += share.size();
    rounds.push_back(total);
  }
  EXPECT_EQ(rounds, (std::vector<size_t>{192, 192, 192, 192, 232}));
  data::SampleQueue exact;  // 960: five full rounds, none longer
  EXPECT_EQ(data::assign_round(exact, 3, 64, 960)[0].size(), 64u);
  exact.cursor = 768;
  EXPECT_EQ(data::assign_round(exact, 3, 64, 960)[2].size(), 64u);
  EXPECT_TRUE(data::epoch_done(exact, 960));
}

// A lost replica's positions given back after the epoch's last round, fewer than half a
// round, are filled up with the next epoch's first ones (with a next epoch), and every
// position of both epochs still counts once; without one they make a round of their own.
TEST(SampleQueueTest, ARedoneRemainderIsFilledUpWithTheNextEpochs) {
  const int64_t n = 300, per = 50;
  for (const bool ahead : {true, false}) {
    data::SampleQueue q;
    std::map<int64_t, std::multiset<int64_t>> counted;  // by epoch
    const auto count = [&](const std::vector<int64_t>& share) {
      for (const int64_t p : share)
        counted[q.epoch + p / n].insert(p % n);
    };
    for (const auto& share : data::assign_round(q, 3, per, n, ahead))  // 150 of 300
      count(share);
    const auto last = data::assign_round(q, 3, per, n, ahead);  // the other 150
    count(last[0]);
    count(last[1]);
    data::requeue(q, last[2]);  // lost: 50, a third of a round
    const auto redo = data::assign_round(q, 3, per, n, ahead);
    size_t total = 0, next = 0;
    for (const auto& share : redo) {
      total += share.size();
      next += static_cast<size_t>(
          std::count_if(share.begin(), share.end(), [&](int64_t p) { return p >= n; }));
      count(share);
    }
    EXPECT_EQ(total, ahead ? 150u : 50u);
    EXPECT_EQ(next, ahead ? 100u : 0u);
    EXPECT_TRUE(std::equal(redo[0].begin(), redo[0].end(), last[2].begin()))
        << "this epoch's first";
    ASSERT_TRUE(data::epoch_done(q, n));
    data::next_epoch(q, n);
    while (!data::epoch_done(q, n))
      for (const auto& share : data::assign_round(q, 3, per, n, false))
        count(share);
    ASSERT_EQ(counted.size(), 2u);
    for (const auto& [epoch, positions] : counted)
      for (int64_t i = 0; i < n; ++i)
        EXPECT_EQ(positions.count(i), 1u) << "epoch " << epoch << " position " << i;
  }
}

TEST(SampleQueueTest, TheLastRoundIsSplitEvenlyAndRedoComesFirst) {
  data::SampleQueue q;
  q.cursor = 90;
  q.redo = {3, 4};
  const auto shares = data::assign_round(q, 3, 10, 100);
  // 12 left over 3 replicas: 4 each, the redone positions first.
  EXPECT_EQ(shares[0], (std::vector<int64_t>{3, 4, 90, 91}));
  EXPECT_EQ(shares[1], (std::vector<int64_t>{92, 93, 94, 95}));
  EXPECT_EQ(shares[2], (std::vector<int64_t>{96, 97, 98, 99}));
  EXPECT_TRUE(data::epoch_done(q, 100));
  EXPECT_THROW(data::assign_round(q, 0, 10, 100), std::invalid_argument);
  q.redo = {7};
  const data::SampleQueue back = data::unpack_queue(data::pack(q));
  EXPECT_EQ(back.cursor, q.cursor);
  EXPECT_EQ(back.redo, q.redo);
  EXPECT_THROW(data::unpack_queue({0, 1, 5}), std::invalid_argument);
}

// A joiner in an epoch's last round trains the next epoch's first positions (n + i); the
// ones it did not reach, and a lost joiner's, wait for that epoch (not this one's rounds),
// and every position of both epochs still counts once. The run's last epoch lends none.
TEST(SampleQueueTest, AJoinerInAnEpochsLastRoundTrainsTheNextEpochsPositions) {
  const int64_t n = 160, per = 30;
  data::SampleQueue q;
  std::map<int64_t, std::multiset<int64_t>> counted;  // by epoch
  const auto count = [&](const std::vector<int64_t>& positions) {
    for (const int64_t p : positions)
      counted[q.epoch + p / n].insert(p % n);
  };
  for (const auto& share : data::assign_round(q, 3, per, n))  // 90 of 160
    count(share);
  const auto last = data::assign_round(q, 3, per, n);  // 70 left: 24, 23, 23
  EXPECT_EQ(last[0].size(), 24u);
  EXPECT_TRUE(data::epoch_done(q, n));
  const auto first = data::assign_joiner(q, per, n, true);
  const auto second = data::assign_joiner(q, per, n, true);
  EXPECT_EQ(first.front(), n);
  EXPECT_EQ(second.front(), n + per);
  count(last[1]);  // member 0 lost: its 24 positions go back
  count(last[2]);
  data::requeue(q, last[0]);
  count({first.begin(), first.begin() + 10});  // the first joiner reached 10 of 30
  data::requeue(q, {first.begin() + 10, first.end()});
  data::requeue(q, second);  // the second was lost
  EXPECT_FALSE(data::epoch_done(q, n));
  const auto redo = data::assign_round(q, 2, per, n);  // this epoch's 24 only
  EXPECT_EQ(redo[0].size() + redo[1].size(), 24u);
  for (const auto& share : redo)
    for (const int64_t p : share)
      EXPECT_LT(p, n);
  for (const auto& share : redo)
    count(share);
  ASSERT_TRUE(data::epoch_done(q, n));
  data::next_epoch(q, n);
  EXPECT_EQ(q.epoch, 1);
  EXPECT_EQ(q.cursor, 2 * per);
  while (!data::epoch_done(q, n))
    for (const auto& share : data::assign_round(q, 2, per, n))
      count(share);
  EXPECT_TRUE(data::assign_joiner(q, per, n, false).empty());  // the run's last epoch
  data::SampleQueue fresh;
  EXPECT_THROW(data::next_epoch(fresh, n), std::logic_error);
  ASSERT_EQ(counted.size(), 2u);
  for (const auto& [epoch, positions] : counted) {
    EXPECT_EQ(positions.size(), static_cast<size_t>(n)) << "epoch " << epoch;
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(positions.count(i), 1u) << "epoch " << epoch << ", position " << i;
  }
}

elastic::Observed beats(const std::vector<int64_t>& replicas, int64_t count) {
  elastic::Observed o;
  for (const int64_t r : replicas)
    o.heartbeats[r] = std::to_string(count);
  return o;
}

TEST(MembershipPolicyTest, FormsLosesSilentReplicasAndTakesJoinersIn) {
  elastic::CoordinatorConfig c;
  c.expect = 3;
  c.heartbeat_timeout = 1000ms;
  elastic::MembershipPolicy policy(c);
  auto t = elastic::Clock::now();
  elastic::Observed first;
  first.registered = {2, 0};
  EXPECT_FALSE(policy.step(t, first));  // two of the three expected
  elastic::Observed third;
  third.registered = {1};
  const auto formed = policy.step(t, third);
  ASSERT_TRUE(formed);
  EXPECT_EQ(formed->id, 1);
  EXPECT_EQ(formed->members, (std::vector<int64_t>{0, 1, 2}));
  // Replica 1 goes silent: within the timeout nothing changes, past it a view drops it.
  for (int64_t i = 1; i <= 9; ++i)
    EXPECT_FALSE(policy.step(t + i * 100ms, beats({0, 2}, i)));
  const auto lost = policy.step(t + 1100ms, beats({0, 2}, 11));
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->id, 2);
  EXPECT_EQ(lost->members, (std::vector<int64_t>{0, 2}));
  EXPECT_NE(lost->reason.find("lost [1]"), std::string::npos);
  // A joiner comes in behind the members; a member leaving is not lost.
  elastic::Observed join = beats({0, 2}, 12);
  join.registered = {1001};
  const auto joined = policy.step(t + 1200ms, join);
  ASSERT_TRUE(joined);
  EXPECT_EQ(joined->members, (std::vector<int64_t>{0, 2, 1001}));
  elastic::Observed leave = beats({0, 2, 1001}, 13);
  leave.left = {2};
  const auto left = policy.step(t + 1300ms, leave);
  ASSERT_TRUE(left);
  EXPECT_EQ(left->members, (std::vector<int64_t>{0, 1001}));
  EXPECT_NE(left->reason.find("left [2]"), std::string::npos);
}

TEST(MembershipPolicyTest, FormsWithTheMinimumAfterTheFormTimeoutAndEndsWhenAllAreLost) {
  elastic::CoordinatorConfig c;
  c.expect = 4;
  c.min_replicas = 2;
  c.form_timeout = 5000ms;
  c.heartbeat_timeout = 1000ms;
  elastic::MembershipPolicy policy(c);
  const auto t = elastic::Clock::now();
  elastic::Observed o;
  o.registered = {0, 1};
  EXPECT_FALSE(policy.step(t, o));
  const auto formed = policy.step(t + 5001ms, beats({0, 1}, 1));
  ASSERT_TRUE(formed);
  EXPECT_EQ(formed->members.size(), 2u);
  const auto gone = policy.step(t + 7000ms, elastic::Observed{});
  ASSERT_TRUE(gone);
  EXPECT_TRUE(gone->members.empty());
}

// The run's state lives in the founders and in joiners once they entered: a view whose
// members would all be joiners that have not entered ends the run at once, instead of leaving
// them to wait for a donor that will never come.
TEST(MembershipPolicyTest, EndsWhenOnlyJoinersThatHaveNotEnteredAreLeft) {
  elastic::CoordinatorConfig c;
  c.expect = 2;
  c.heartbeat_timeout = 1000ms;
  for (const bool entered : {false, true}) {
    SCOPED_TRACE(entered ? "the joiner entered" : "the joiner had not entered");
    elastic::MembershipPolicy policy(c);
    const auto t = elastic::Clock::now();
    elastic::Observed o;
    o.registered = {0, 1};
    ASSERT_TRUE(policy.step(t, o));
    elastic::Observed join = beats({0, 1}, 1);
    join.registered = {1001};
    const auto joined = policy.step(t + 100ms, join);
    ASSERT_TRUE(joined);
    EXPECT_EQ(joined->members, (std::vector<int64_t>{0, 1, 1001}));
    EXPECT_TRUE(policy.holds(0));
    EXPECT_FALSE(policy.holds(1001));
    elastic::Observed later = beats({1001}, 2);
    if (entered) later.holding = {1001};
    EXPECT_FALSE(policy.step(t + 500ms, later));
    EXPECT_EQ(policy.holds(1001), entered);
    const auto lost = policy.step(t + 1200ms, beats({1001}, 3));  // 0 and 1 silent
    ASSERT_TRUE(lost);
    if (entered) {
      EXPECT_EQ(lost->members, (std::vector<int64_t>{1001}));
    } else {
      EXPECT_TRUE(lost->members.empty());
      EXPECT_NE(lost->reason.find("holds the run's state"), std::string::npos) << lost->reason;
    }
  }
}

// A joiner that a view named and a later one dropped (declared lost: its heartbeats came late
// while its process started) is never named again under that id: its wait to enter must end
// at once with a CommError (its caller registers again), not wait out the timeout.
TEST(MembershipTest, AJoinerDroppedBeforeItEnteredStopsWaitingAtOnce) {
  auto hosted = comm::KeyValueStore::host("127.0.0.1", 0, 10s);
  auto store = hosted->another_client();
  const auto publish = [&](int64_t id, std::vector<int64_t> members, const std::string& why) {
    elastic::View v;
    v.id = id;
    v.members = std::move(members);
    v.reason = why;
    store->set(elastic::key::view(id), v.to_json());
    store->set(elastic::key::latest_view(), std::to_string(id));
  };
  publish(1, {7}, "formed with [7]");
  store->set(elastic::key::challenge(), "c");  // as a leading coordinator does
  elastic::MembershipConfig config;
  config.port = hosted->port();
  config.replica_id = 1001;
  elastic::Membership joiner(config);
  publish(2, {7, 1001}, "joined [1001]");  // not adopted: the members failed first
  publish(3, {7}, "lost [1001]");
  const auto start = std::chrono::steady_clock::now();
  try {
    joiner.wait_to_enter(20s);
    FAIL() << "a dropped joiner entered";
  } catch (const comm::CommError& e) {
    EXPECT_NE(std::string(e.what()).find("view 3 dropped replica 1001"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  // One the next view names and the members adopt enters with that view.
  config.replica_id = 1002;
  elastic::Membership next(config);
  publish(4, {7, 1002}, "joined [1002]");
  store->set(elastic::key::adopted(4), "7");
  const elastic::View entered = next.wait_to_enter(20s);
  EXPECT_EQ(entered.id, 4);
  EXPECT_EQ(entered.members, (std::vector<int64_t>{7, 1002}));
}

// The coordinator reads who left and who holds the run's state only after a replica bumped
// key::notices (not every replica's keys every poll): a replica that leaves is dropped as
// left, at once, and a joiner that holds the state keeps the run going once the founders
// left. The heartbeat timeout (60 s) rules out their being declared lost instead.
TEST(CoordinatorTest, NoticesALeaverAndAHolderWithoutReadingEveryKeyEachPoll) {
  elastic::CoordinatorConfig c;
  c.expect = 2;
  c.heartbeat_timeout = 60s;
  EXPECT_EQ(elastic::poll_interval(200ms), 10ms);
  EXPECT_EQ(elastic::poll_interval(1s), 50ms);
  EXPECT_EQ(elastic::heartbeat_interval(1s), 100ms);
  EXPECT_EQ(elastic::heartbeat_interval(200ms), 20ms);
  elastic::Coordinator coordinator("127.0.0.1", 0, c, 10s);
  std::vector<int64_t> held;
  elastic::CoordinatorLog log;
  log.holds = [&](int64_t r) { held.push_back(r); };
  std::thread polling([&] { coordinator.run(log); });
  elastic::MembershipConfig config;
  config.port = coordinator.port();
  const auto member = [&](int64_t id) {
    config.replica_id = id;
    return std::make_unique<elastic::Membership>(config);
  };
  auto first = member(1), second = member(2);
  const auto view_after = [&](elastic::Membership& m, int64_t than) {
    const auto id = m.wait_newer(than, 10s);
    if (!id) throw std::runtime_error("no view after " + std::to_string(than));
    return m.view(*id);
  };
  EXPECT_EQ(view_after(*first, 0).members, (std::vector<int64_t>{1, 2}));
  const auto left_at = std::chrono::steady_clock::now();
  second->leave();
  const elastic::View without = view_after(*first, 1);
  EXPECT_EQ(without.members, (std::vector<int64_t>{1}));
  EXPECT_NE(without.reason.find("left [2]"), std::string::npos) << without.reason;
  EXPECT_LT(std::chrono::steady_clock::now() - left_at, 5s);
  auto joiner = member(3);
  EXPECT_EQ(view_after(*first, without.id).members, (std::vector<int64_t>{1, 3}));
  joiner->hold();
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (held.empty() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(held, (std::vector<int64_t>{3}));
  first->leave();  // the joiner holds the state: the run goes on with it
  const elastic::View last = view_after(*joiner, without.id + 1);
  EXPECT_EQ(last.members, (std::vector<int64_t>{3}));
  coordinator.stop();
  polling.join();
}

TEST(FaultPlanTest, ParsesEntriesAndNamesEachReplicaByItsSlotAndRestart) {
  const auto plan = elastic::parse_fault_plan(
      "kill:1@3:inner,rejoin:1@6,corrupt:2@4,"
      "kill:0@7:join,kill:2@9:close");
  EXPECT_TRUE(plan.kills_at(1, 3, elastic::FaultPhase::kInner));
  EXPECT_TRUE(plan.kills_at(2, 9, elastic::FaultPhase::kClose));
  EXPECT_FALSE(plan.kills_at(2, 9, elastic::FaultPhase::kInner));
  EXPECT_FALSE(plan.kills_at(101, 3, elastic::FaultPhase::kInner));  // the replacement lives
  EXPECT_TRUE(plan.kills_at(100, 7, elastic::FaultPhase::kJoin));
  EXPECT_EQ(plan.rejoin_round(101), 6);
  EXPECT_FALSE(plan.rejoin_round(1));
  EXPECT_EQ(plan.due_before(6), (std::vector<int64_t>{101}));
  EXPECT_TRUE(plan.corrupts(2, 4));
  EXPECT_TRUE(elastic::parse_fault_plan("").empty());
  for (const char* bad : {"kill:1@3", "kill:1@3:lunch", "rejoin:1@0", "explode:1@2",
                          "kill:x@3:inner", "rejoin:1@2:inner", "kill:1"})
    EXPECT_THROW(elastic::parse_fault_plan(bad), std::invalid_argument) << bad;
}

// A slot killed again and again: each kill is of the incarnation then alive, each rejoin sets
// its own replacement's round, and no planned id reaches the ids the store hands out.
TEST(FaultPlanTest, EachKillOfASlotIsOfItsNextReplacement) {
  const auto plan = elastic::parse_fault_plan(
      "kill:1@3:inner,rejoin:1@4,kill:1@6:exchange,rejoin:1@8,kill:1@8:join");
  EXPECT_TRUE(plan.kills_at(1, 3, elastic::FaultPhase::kInner));
  EXPECT_FALSE(plan.kills_at(1, 6, elastic::FaultPhase::kExchange));  // dead by then
  EXPECT_TRUE(plan.kills_at(101, 6, elastic::FaultPhase::kExchange));
  EXPECT_FALSE(plan.kills_at(101, 8, elastic::FaultPhase::kJoin));
  EXPECT_TRUE(plan.kills_at(201, 8, elastic::FaultPhase::kJoin));
  EXPECT_EQ(plan.rejoin_round(101), 4);
  EXPECT_EQ(plan.rejoin_round(201), 8);
  EXPECT_EQ(plan.rejoin_round(301), 8);  // beyond the plan's rejoins: the last one's
  EXPECT_EQ(plan.due_before(4), (std::vector<int64_t>{101}));
  EXPECT_EQ(plan.due_before(8), (std::vector<int64_t>{201}));
  std::string many;
  for (int64_t k = 0; k <= elastic::kMaxPlannedRestarts; ++k)
    many += "kill:2@" + std::to_string(k) + ":inner,";
  EXPECT_THROW(elastic::parse_fault_plan(many), std::invalid_argument);
  EXPECT_GT(elastic::kFirstRegisteredId,
            99 + elastic::kRestartStride * elastic::kMaxPlannedRestarts);
}

// A group started ahead (connect_ahead) is what a later connect() of the same name and
// members takes up, and carries a sum like any; one started under another name is not taken
// up (its members connect the name they were asked for afresh).
TEST(MembershipTest, AGroupConnectedAheadIsTakenUpUnderItsNameOnly) {
  auto hosted = comm::KeyValueStore::host("127.0.0.1", 0, 10s);
  auto store = hosted->another_client();
  elastic::View v;
  v.id = 1;
  v.members = {1, 2};
  v.reason = "formed with [1, 2]";
  store->set(elastic::key::view(1), v.to_json());
  store->set(elastic::key::latest_view(), "1");
  store->set(elastic::key::challenge(), "c");  // as a leading coordinator does
  elastic::MembershipConfig config;
  config.port = hosted->port();
  config.connect_timeout = 3s;  // the group never taken up ends at it
  std::array<double, 2> sums{};
  std::array<int, 2> ahead{}, afresh{};
  std::vector<std::thread> replicas;
  for (int64_t id = 1; id <= 2; ++id)
    replicas.emplace_back([&, id] {
      const auto r = static_cast<size_t>(id - 1);
      elastic::MembershipConfig mine = config;
      mine.replica_id = id;
      elastic::Membership m(mine);
      m.connect_ahead("g", {1, 2});
      if (id == 1) m.connect_ahead("h", {1, 2});  // replica 2 never starts it
      std::this_thread::sleep_for(std::chrono::milliseconds(200 * id));
      at::Tensor t = torch::full({4}, static_cast<float>(id));
      m.connect("g", {1, 2}).native_all_reduce(t, comm::ReduceOp::kSum);
      sums[r] = t[0].item<double>();
      ahead[r] = m.connected_ahead();
      m.connect("k", {1, 2});
      afresh[r] = !m.connected_ahead();
    });
  for (auto& r : replicas)
    r.join();
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(sums[r], 3.0) << "replica " << r + 1;
    EXPECT_TRUE(ahead[r]) << "replica " << r + 1;
    EXPECT_TRUE(afresh[r]) << "replica " << r + 1;
  }
}

}  // namespace
}  // namespace dtrain
