// `dtrain launch -n N -- CMD ARGS...`: N local ranks of any command.
#include <memory>

#include "dtrain/cli/commands.h"
#include "dtrain/cli/common.h"
#include "dtrain/comm/launch.h"

namespace dtrain::cli {

void register_launch(CLI::App& parent, int& exit_code) {
  auto opts = std::make_shared<comm::LaunchOptions>();
  auto lab = std::make_shared<std::string>();
  CLI::App* sub = parent.add_subcommand(
      "launch",
      "start N local ranks of a command with RANK/WORLD_SIZE/MASTER_* set; output prefixed "
      "with [rank k]; if one fails the others are stopped and its status is returned");
  sub->add_option("-n,--nprocs", opts->nprocs, "number of local ranks")
      ->required()
      ->check(CLI::Range(1, 1024));
  sub->add_option("--master-addr", opts->master_addr, "rendezvous address")->capture_default_str();
  sub->add_option("--master-port", opts->master_port, "rendezvous port (default: a free one)")
      ->check(CLI::Range(0, 65535));
  sub->add_flag("--keep-going", opts->keep_going,
                "when a rank fails, let the others run to their own end");
  sub->add_flag("--no-prefix{false}", opts->prefix_output, "do not prefix output lines");
  sub->add_option("--max-restarts", opts->max_restarts,
                  "when a rank fails, stop all and start all again, at most K times "
                  "(DTRAIN_RESTART tells the ranks which start it is)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--grace", opts->grace_s, "seconds between SIGTERM and SIGKILL when stopping")
      ->capture_default_str();
  sub->add_option("--netlab", *lab,
                  "run rank k on host k of this network lab (dtrain netlab up NAME ...); the "
                  "rendezvous is on host 0");
  sub->add_option("command", opts->command, "command and its arguments (after --)")->required();
  sub->callback([opts, lab, &exit_code] {
    if (!lab->empty()) place_on_lab(*lab, *opts);
    exit_code = comm::launch(*opts);
  });
}

}  // namespace dtrain::cli
