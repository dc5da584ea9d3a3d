// `dtrain coordinator`: the membership of an elastic run (docs/elastic.md), in a process of
// its own, or kept in an etcd cluster (--store) by several coordinators. `dtrain train -n N
// --elastic` starts one itself; across hosts run it where every replica can reach it and start
// replicas anywhere with `dtrain train ... --elastic --join HOST:PORT`.
#include <chrono>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <memory>

#include "dtrain/cli/commands.h"
#include "dtrain/cli/common.h"
#include "dtrain/elastic/coordinator.h"

namespace dtrain::cli {
namespace {

struct CoordinatorOptions {
  std::string host = "127.0.0.1";
  int port = 29500;
  int expect = 1;
  int min_replicas = 1;
  double heartbeat_timeout_s = 1.0;
  double form_timeout_s = 60;
  double timeout_s = 300;
  std::string store;  // etcd://...: the membership lives there, not in this process
  double takeover_after_s = 2.0;
  std::string token;  // --token, else DTRAIN_TOKEN
};

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

std::unique_ptr<elastic::Coordinator> make_coordinator(const CoordinatorOptions& o,
                                                       const elastic::CoordinatorConfig& c) {
  if (!o.store.empty()) {
    auto coordinator = std::make_unique<elastic::Coordinator>(o.store, c, ms(o.timeout_s));
    std::cerr << "coordinator: membership in " << o.store << "; waiting for " << c.expect
              << " replica(s) or for the lead" << std::endl;
    return coordinator;
  }
  auto coordinator = std::make_unique<elastic::Coordinator>(o.host, o.port, c, ms(o.timeout_s));
  std::cerr << "coordinator: listening on " << o.host << ":" << coordinator->port()
            << ", waiting for " << c.expect << " replica(s)" << std::endl;
  return coordinator;
}

}  // namespace

void register_coordinator(CLI::App& parent, int& exit_code) {
  auto o = std::make_shared<CoordinatorOptions>();
  CLI::App* sub = parent.add_subcommand(
      "coordinator",
      "host an elastic run's membership: replicas (train --parallel diloco --elastic --join "
      "HOST:PORT) register here; it declares lost those whose heartbeats stop and publishes "
      "each change; exits 0 once the run is done");
  sub->add_option("--host", o->host, "address to listen on (every replica must reach it)")
      ->capture_default_str();
  sub->add_option("--port", o->port, "port to listen on (0: a free one, printed)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  sub->add_option("--expect", o->expect, "replicas the run starts with")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  sub->add_option("--min-replicas", o->min_replicas,
                  "start with this many once --form-timeout has passed")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  sub->add_option("--heartbeat-timeout", o->heartbeat_timeout_s,
                  "seconds without a heartbeat before a replica is declared lost")
      ->check(CLI::Range(0.05, 3600.0))
      ->capture_default_str();
  sub->add_option("--form-timeout", o->form_timeout_s,
                  "seconds to wait for --expect replicas before starting with --min-replicas")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--timeout", o->timeout_s, "seconds any store request may take")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--store", o->store,
                  "etcd://HOST:PORT[,HOST:PORT...][/PREFIX]: keep the membership in this etcd "
                  "cluster instead of hosting it (--host/--port unused); run one coordinator "
                  "or several: one leads, the others take over when it is gone");
  sub->add_option("--takeover-after", o->takeover_after_s,
                  "--store: seconds a leading coordinator may go silent before a standby takes "
                  "over")
      ->check(CLI::Range(0.2, 3600.0))
      ->capture_default_str();
  sub->add_option("--token", o->token,
                  "secret every replica must prove to register (overrides DTRAIN_TOKEN, which "
                  "other users cannot read in the process list); a replica without it is "
                  "refused");
  sub->callback([o, &exit_code] {
    elastic::CoordinatorConfig c;
    c.expect = o->expect;
    c.min_replicas = std::min(o->min_replicas, o->expect);
    c.heartbeat_timeout = ms(o->heartbeat_timeout_s);
    c.form_timeout = ms(o->form_timeout_s);
    c.takeover_after = ms(o->takeover_after_s);
    const char* env_token = std::getenv("DTRAIN_TOKEN");
    c.token = !o->token.empty() ? o->token : env_token != nullptr ? env_token : "";
    const auto coordinator = make_coordinator(*o, c);
    elastic::CoordinatorLog log;
    log.published = [](const elastic::Published& p) {
      std::cerr << "coordinator: view " << p.view.id << ": " << p.view.reason << "; members "
                << elastic::describe(p.view.members);
      for (const auto& [r, s] : p.view.silent_s)
        std::cerr << std::fixed << std::setprecision(2) << " (" << r << " silent " << s << " s)";
      std::cerr << std::endl;
    };
    log.holds = [](int64_t r) {
      std::cerr << "coordinator: replica " << r << " entered: it holds the run's state"
                << std::endl;
    };
    log.leads = [](int64_t view) {
      std::cerr << "coordinator: leading the run (as of view " << view << ")" << std::endl;
    };
    log.refused = [](int64_t r) {
      std::cerr << "coordinator: refused replica " << r
                << ": its proof of DTRAIN_TOKEN differs from this coordinator's" << std::endl;
    };
    log.deposed = [] {
      std::cerr << "coordinator: another coordinator leads now; standing by" << std::endl;
    };
    const bool done = coordinator->run(log);
    if (!done)
      std::cerr << "coordinator: every replica that held the run's state was lost; the run "
                   "ends with them"
                << std::endl;
    exit_code = done ? 0 : 1;
  });
}

}  // namespace dtrain::cli
