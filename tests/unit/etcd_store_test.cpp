// The etcd store against a real three-member etcd cluster: it answers every call as c10d's
// TCPStore does (the reference, side by side), it outlives the member it talks to, and of
// two coordinators' claims one leads and the other takes over when it goes quiet.
#include <gtest/gtest.h>

#include <random>

#include "../support/etcd_cluster.h"
#include "dtrain/base/base64.h"
#include "dtrain/comm/error.h"
#include "dtrain/comm/etcd_client.h"
#include "dtrain/comm/kv_store.h"
#include "dtrain/comm/launch.h"
#include "dtrain/elastic/coordinator.h"
#include "dtrain/elastic/leader_claim.h"
#include "dtrain/elastic/view.h"

namespace dtrain {
namespace {

using namespace std::chrono_literals;

testing::EtcdCluster& cluster() {
  static testing::EtcdCluster c(3);  // one for the binary's tests: each takes its own prefix
  return c;
}

std::string fresh_prefix() {
  static int n = 0;
  return "test" + std::to_string(getpid()) + "-" + std::to_string(n++);
}

TEST(Base64Test, RoundTripsEveryByteAndRejectsWhatIsNotBase64) {
  std::string all;
  for (int b = 0; b < 256; ++b)
    all += static_cast<char>(b);
  for (size_t n = 0; n < 7; ++n)
    EXPECT_EQ(base64_decode(base64_encode(all.substr(0, n))), all.substr(0, n));
  EXPECT_EQ(base64_decode(base64_encode(all)), all);
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");  // RFC 4648's examples
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_FALSE(base64_decode("Zm9").has_value());
  EXPECT_FALSE(base64_decode("Zm*v").has_value());
  EXPECT_FALSE(base64_decode("Z=9v").has_value());
  EXPECT_FALSE(base64_decode("Zg=v").has_value());
}

TEST(EtcdAddressTest, ParsesMembersAndPrefixAndNamesWhatIsWrong) {
  const auto a = comm::EtcdAddress::parse("etcd://10.0.0.1:2379,host-b:2380/runs/7");
  ASSERT_EQ(a.members.size(), 2u);
  EXPECT_EQ(a.members[1], (std::pair<std::string, int>{"host-b", 2380}));
  EXPECT_EQ(a.prefix, "runs/7/");
  EXPECT_EQ(comm::EtcdAddress::parse("etcd://h:1").prefix, "dtrain/");
  for (const char* bad : {"h:1", "etcd://", "etcd://h", "etcd://h:0", "etcd://h:1,", "etcd://:5",
                          "etcd://h:1/", "etcd://h:99999"})
    EXPECT_THROW(comm::EtcdAddress::parse(bad), std::invalid_argument) << bad;
}

// One script of calls on a TCPStore and on etcd: every answer the same.
TEST(EtcdStoreTest, AnswersEveryCallAsTheTcpStoreDoes) {
  ASSERT_TRUE(cluster().ready()) << "etcd did not start (scripts/install-deps.sh installs it)";
  auto hosted = comm::KeyValueStore::host("127.0.0.1", 0, 5s);
  auto tcp = hosted->another_client();
  auto etcd = comm::KeyValueStore::etcd(cluster().address(fresh_prefix()), 5s);
  const std::string binary("\0a\0b\xff", 5);
  std::vector<std::string> answers[2];
  int i = 0;
  for (comm::KeyValueStore* s : {tcp.get(), etcd.get()}) {
    auto& out = answers[i++];
    out.push_back(s->try_get("unset").value_or("<unset>"));
    out.push_back(s->compare_set("unset", "x", "y"));  // stays unset: answers the expectation
    out.push_back(s->try_get("unset").value_or("<unset>"));
    out.push_back(s->compare_set("k", "", "first"));  // unset and "" expected: set
    out.push_back(s->compare_set("k", "wrong", "second"));
    out.push_back(s->compare_set("k", "first", "second"));
    s->set("empty", "");
    out.push_back(s->try_get("empty").value_or("<unset>"));
    out.push_back(s->compare_set("empty", "", "filled"));
    s->set("bin", binary);
    out.push_back(s->get("bin"));
    out.push_back(std::to_string(s->add("n", 5)));
    out.push_back(std::to_string(s->add("n", -7)));
    out.push_back(s->get("n"));
    out.push_back(std::to_string(s->erase("n")));
    out.push_back(std::to_string(s->erase("n")));
    out.push_back(std::to_string(s->add("n", 1)));
    out.push_back(std::to_string(s->wait({"k", "bin"}, 100ms)));
    out.push_back(std::to_string(s->wait({"k", "never"}, 100ms)));
  }
  EXPECT_EQ(answers[0], answers[1]);
  EXPECT_THROW(etcd->add("k", 1), comm::CommError);  // "second" is not a counter
}

TEST(EtcdStoreTest, AnUnreachableClusterIsAClearError) {
  const int nobody = comm::pick_free_port();
  try {
    comm::KeyValueStore::etcd("etcd://127.0.0.1:" + std::to_string(nobody) + "/x", 500ms);
    FAIL() << "connected to nobody";
  } catch (const comm::CommError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot reach the store at etcd://127.0.0.1:"),
              std::string::npos)
        << e.what();
  }
}

// The store keeps answering, the same values, while members die (each SIGKILLed with a
// client connected to it, the leader among them), as long as a majority lives.
TEST(EtcdStoreTest, OutlivesTheMemberItTalksToAndTheLeader) {
  testing::EtcdCluster own(3);
  ASSERT_TRUE(own.ready());
  auto store = comm::KeyValueStore::etcd(own.address("outlive"), 20s);
  auto other = store->another_client();
  for (int i = 0; i < 20; ++i)
    store->add("count", 1);
  store->set("key", "before");
  const int leader = own.leader();
  ASSERT_GE(leader, 0);
  own.kill_member(leader);
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(store->add("count", 1), 21 + i);
  EXPECT_EQ(other->get("key"), "before");
  EXPECT_EQ(other->compare_set("key", "before", "after"), "after");
  EXPECT_EQ(store->try_get("key"), std::optional<std::string>("after"));
  EXPECT_EQ(other->get("count"), "40");
}

// Two coordinators' claims on one store: the first leads, the second stands by, and takes
// over only once the first stopped renewing for a whole takeover time; the first then learns it
// lost.
TEST(LeaderClaimTest, OneLeadsTheOtherTakesOverWhenItGoesQuiet) {
  ASSERT_TRUE(cluster().ready());
  auto store_a = comm::KeyValueStore::etcd(cluster().address(fresh_prefix()), 5s);
  auto store_b = store_a->another_client();
  elastic::LeaderClaim a(*store_a, "a", 400ms), b(*store_b, "b", 400ms);
  using Clock = elastic::LeaderClaim::Clock;
  bool took = false;
  auto t = Clock::now();
  EXPECT_TRUE(a.hold(t, took));
  EXPECT_TRUE(took);
  for (int i = 0; i < 10; ++i) {  // a renews every 100 ms: b never takes over
    t += 100ms;
    EXPECT_TRUE(a.hold(t, took));
    EXPECT_FALSE(took);
    EXPECT_FALSE(b.hold(t, took));
  }
  t += 300ms;  // a goes quiet: b waits a whole takeover time from when it saw the value change
  EXPECT_FALSE(b.hold(t, took));
  t += 200ms;
  EXPECT_TRUE(b.hold(t, took));
  EXPECT_TRUE(took);
  EXPECT_FALSE(a.hold(t + 200ms, took));  // a's renewal fails: it stands by
  EXPECT_TRUE(b.hold(t + 200ms, took));
  EXPECT_FALSE(took);
}

// A coordinator taking over decides as the one before would have: the checkpoint carries
// the view, the candidates and the holders.
TEST(MembershipPolicyTest, ACheckpointRestoresTheDecisions) {
  elastic::CoordinatorConfig config;
  config.expect = 2;
  config.heartbeat_timeout = 1000ms;
  elastic::MembershipPolicy p(config);
  const auto t0 = elastic::Clock::now();
  elastic::Observed o;
  o.registered = {1001, 1002};
  ASSERT_TRUE(p.step(t0, o).has_value());  // formed with both
  elastic::Observed joining;
  joining.registered = {1003};
  int64_t next_seq = 0;
  const std::string checkpoint = p.checkpoint(3);
  auto q = elastic::MembershipPolicy::restore(config, checkpoint, t0, next_seq);
  EXPECT_EQ(next_seq, 3);
  EXPECT_EQ(q.current().members, p.current().members);
  EXPECT_TRUE(q.holds(1001) && q.holds(1002));
  // Both decide the same from here: 1003 joins; later 1001 goes silent and is lost.
  for (auto* policy : {&p, &q}) {
    const auto v = policy->step(t0 + 100ms, joining);
    ASSERT_TRUE(v.has_value());
    EXPECT_EQ(v->members, (std::vector<int64_t>{1001, 1002, 1003}));
    elastic::Observed beats;
    beats.heartbeats = {{1002, "5"}, {1003, "5"}};
    const auto lost = policy->step(t0 + 1500ms, beats);
    ASSERT_TRUE(lost.has_value());
    EXPECT_EQ(lost->members, (std::vector<int64_t>{1002, 1003}));
  }
  EXPECT_THROW(elastic::MembershipPolicy::restore(config, "{}", t0, next_seq),
               std::invalid_argument);
}

}  // namespace
}  // namespace dtrain
