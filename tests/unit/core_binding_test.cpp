// --bind cores (comm/core_binding.h). Each case runs in a forked child, so the test
// process keeps its own affinity; the child reports by exit status.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include "dtrain/comm/core_binding.h"
#include "dtrain/comm/world.h"

namespace dtrain::comm {
namespace {

std::vector<int> cores_of(int tid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(tid, sizeof(set), &set);
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cores.push_back(c);
  return cores;
}

// Runs `check` in a child; its exit status 0 means it held.
int in_child(const std::function<bool()>& check) {
  const pid_t pid = fork();
  if (pid == 0) _exit(check() ? 0 : 1);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

// Under taskset (here: an affinity of one core), ranks get threads for the cores the
// process may use, not for all the host has.
TEST(CoreBindingTest, ThreadsPerRankCountTheCoresThisProcessMayUse) {
  const std::vector<int> cores = allowed_cores();
  if (cores.size() < 2) GTEST_SKIP() << "needs 2 cores";
  EXPECT_EQ(threads_per_rank(1), static_cast<int>(cores.size()));
  EXPECT_EQ(in_child([&] {
              cpu_set_t one;
              CPU_ZERO(&one);
              CPU_SET(cores.back(), &one);
              if (sched_setaffinity(0, sizeof(one), &one) != 0) return false;
              return allowed_cores() == std::vector<int>{cores.back()} &&
                     threads_per_rank(1) == 1 && threads_per_rank(2) == 1;
            }),
            0);
}

TEST(CoreBindingTest, TheLastLocalRankGetsTheLastCoreAndItsThreadsFollow) {
  const std::vector<int> cores = allowed_cores();
  if (cores.size() < 2) GTEST_SKIP() << "needs 2 cores";
  const int n = static_cast<int>(cores.size());
  EXPECT_EQ(
      in_child([&] {
        std::vector<int> seen_by_thread;
        std::thread early([&] {  // started before: bound too
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          seen_by_thread = cores_of(static_cast<int>(syscall(SYS_gettid)));
        });
        if (!bind_rank_to_cores(n - 1, n, 1)) return false;
        early.join();
        std::vector<int> seen_later;
        std::thread later([&] { seen_later = cores_of(static_cast<int>(syscall(SYS_gettid))); });
        later.join();
        const std::vector<int> expected{cores.back()};
        return cores_of(0) == expected && seen_by_thread == expected && seen_later == expected;
      }),
      0);
}

TEST(CoreBindingTest, RanksThatWouldShareCoresStayUnbound) {
  const std::vector<int> cores = allowed_cores();
  const int n = static_cast<int>(cores.size());
  EXPECT_EQ(in_child([&] { return !bind_rank_to_cores(0, n + 1, 1) && cores_of(0) == cores; }), 0);
  EXPECT_EQ(in_child([&] { return !bind_rank_to_cores(0, 2, n) && cores_of(0) == cores; }), 0);
  EXPECT_EQ(in_child([&] { return !bind_rank_to_cores(0, 1, 1) && cores_of(0) == cores; }), 0);
}

TEST(CoreBindingTest, BatchThreadsAreBatch) {
  EXPECT_EQ(in_child([] {
              std::atomic<int> tid{0};
              std::thread t([&] {
                tid = static_cast<int>(syscall(SYS_gettid));
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
              });
              while (tid == 0)
                std::this_thread::yield();
              run_as_batch({tid.load()});
              const bool batch = sched_getscheduler(tid.load()) == SCHED_BATCH;
              const bool caller_untouched = sched_getscheduler(0) == SCHED_OTHER;
              t.join();
              return batch && caller_untouched;
            }),
            0);
}

}  // namespace
}  // namespace dtrain::comm
