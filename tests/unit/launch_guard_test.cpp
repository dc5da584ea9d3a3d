// launch() leaves the process as it found it: its signal handlers are restored, and when
// it fails after starting ranks, the started ranks are stopped and reaped.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>

#include "dtrain/comm/launch.h"

namespace dtrain::comm {
namespace {

void marker_handler(int) {}

void install_marker() {
  struct sigaction sa {};
  sa.sa_handler = marker_handler;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGCHLD})
    ASSERT_EQ(sigaction(sig, &sa, nullptr), 0);
}

void expect_marker_restored() {
  for (int sig : {SIGINT, SIGTERM, SIGCHLD}) {
    struct sigaction now {};
    ASSERT_EQ(sigaction(sig, nullptr, &now), 0);
    EXPECT_EQ(now.sa_handler, &marker_handler) << "signal " << sig;
  }
}

void restore_defaults() {
  for (int sig : {SIGINT, SIGTERM, SIGCHLD})
    signal(sig, SIG_DFL);
}

// Descriptors open now; new ones take the lowest free numbers below RLIMIT_NOFILE.
int open_fds() {
  int count = 0;
  DIR* d = opendir("/proc/self/fd");
  for (dirent* e; d != nullptr && (e = readdir(d)) != nullptr;)
    count += e->d_name[0] != '.';
  if (d != nullptr) closedir(d);
  return count - 1;  // the directory's own descriptor
}

TEST(LaunchGuardTest, RestoresSignalHandlersAfterARun) {
  install_marker();
  LaunchOptions o;
  o.nprocs = 2;
  o.command = {"true"};
  EXPECT_EQ(launch(o), 0);
  expect_marker_restored();
  restore_defaults();
}

TEST(LaunchGuardTest, AFailureAfterStartingRanksStopsThemAndRestoresHandlers) {
  install_marker();
  // Room for the signal pipe and about two ranks' output pipes: starting the third fails.
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  rlimit tight = old;
  tight.rlim_cur = static_cast<rlim_t>(open_fds() + 2 + 2 * 4);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &tight), 0);
  LaunchOptions o;
  o.nprocs = 8;
  o.command = {"sleep", "30"};
  EXPECT_THROW(launch(o), std::runtime_error);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  // Every started rank was killed and reaped: this process has no children left.
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
  expect_marker_restored();
  restore_defaults();
}

}  // namespace
}  // namespace dtrain::comm
