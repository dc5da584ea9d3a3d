#include "dtrain/netlab/lab.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "dtrain/netlab/impairer.h"
#include "dtrain/netlab/plan.h"

namespace dtrain::netlab {
namespace {

std::string join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv)
    out += (out.empty() ? "" : " ") + a;
  return out;
}

// Runs argv (no shell); returns its exit status and what it printed.
int run_capturing(const std::vector<std::string>& argv, std::string& output) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("netlab: pipe failed");
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    throw std::runtime_error(std::string("netlab: fork failed: ") + strerror(errno));
  }
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    std::vector<char*> args;
    for (const auto& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "cannot run %s: %s", args[0], strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) != 0;) {
    if (n > 0) output.append(buf, static_cast<size_t>(n));
    if (n < 0 && errno != EINTR) break;
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void run(const Command& command) {
  std::string output;
  const int status = run_capturing(command.argv, output);
  if (status == 0 || command.may_fail) return;
  while (!output.empty() && output.back() == '\n')
    output.pop_back();
  std::string why = "`" + join(command.argv) + "` failed: " + output;
  const bool netem =
      std::find(command.argv.begin(), command.argv.end(), "netem") != command.argv.end();
  if (netem && output.find("qdisc kind is unknown") != std::string::npos) {
    why =
        "this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM); unset DTRAIN_NETLAB_IMPAIR=netem "
        "to make delay and loss with dtrain's own impairer (" +
        why + ")";
  }
  throw std::runtime_error("netlab: " + why);
}

void run_all(const std::vector<Command>& commands) {
  for (const auto& c : commands)
    run(c);
}

std::string state_file(const std::string& name) {
  return state_dir() + "/" + name + ".json";
}

std::string impairer_log(const std::string& name) {
  return state_dir() + "/" + name + ".impairer.log";
}

bool exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

// Namespaces whose names start with the lab's prefix (a lab whose state file was lost can
// still be removed).
std::vector<std::string> namespaces_of(const std::string& name) {
  std::vector<std::string> out;
  const std::string prefix = "dtrain-" + name + "-";
  DIR* dir = opendir("/run/netns");
  if (dir == nullptr) return out;
  while (const dirent* e = readdir(dir)) {
    const std::string n = e->d_name;
    const std::string rest = n.substr(std::min(n.size(), prefix.size()));
    const bool ours =
        n.rfind(prefix, 0) == 0 &&
        (rest == "sw" || (rest.size() > 1 && rest[0] == 'h' &&
                          rest.find_first_not_of("0123456789", 1) == std::string::npos));
    if (ours) out.push_back(n);
  }
  closedir(dir);
  return out;
}

// Deletes whatever of the lab exists: its namespaces, found by name (so a lab whose build
// stopped half-way or whose state file is gone goes too), and its state file.
// `best_effort`: a failed deletion is no error (a rollback must not hide its cause).
void remove_lab(const std::string& name, bool best_effort) {
  try {
    stop_impairer(load(name).impairer_pid);
  } catch (const std::exception&) {
    // No state (a half-built lab, or removed by hand): its impairer, if any, ends by itself
    // once the namespaces below are gone.
  }
  for (auto command : remove_commands(namespaces_of(name))) {
    command.may_fail = best_effort;
    run(command);
  }
  std::remove(state_file(name).c_str());
  std::remove(impairer_log(name).c_str());
}

void make_dirs(const std::string& path) {
  for (size_t slash = 1; slash != std::string::npos; slash = path.find('/', slash + 1)) {
    mkdir(path.substr(0, slash).c_str(), 0755);
  }
  mkdir(path.c_str(), 0755);
  if (!exists(path)) throw std::runtime_error("netlab: cannot create " + path);
}

Impairment parse_impairment(const std::string& name) {
  if (name == "netem") return Impairment::kNetem;
  if (name == "nfqueue") return Impairment::kNfqueue;
  throw std::runtime_error("unknown impairment '" + name + "' (netem or nfqueue)");
}

nlohmann::json to_json(const LabState& s) {
  nlohmann::json j{{"name", s.spec.name},
                   {"hosts", s.spec.hosts},
                   {"rate_bps", s.spec.rate_bps},
                   {"delay_ms", s.spec.delay_ms},
                   {"loss_percent", s.spec.loss_percent},
                   {"host_namespaces", s.host_namespaces},
                   {"addresses", s.addresses}};
  if (s.spec.uplink_bps) j["uplink_bps"] = *s.spec.uplink_bps;
  if (!s.spec.host_sysctls.empty()) j["host_sysctls"] = s.spec.host_sysctls;
  if (s.impairment) j["impairment"] = impairment_name(*s.impairment);
  if (s.impairer_pid > 0) j["impairer_pid"] = s.impairer_pid;
  return j;
}

LabState from_json(const nlohmann::json& j) {
  LabState s;
  s.spec.name = j.at("name").get<std::string>();
  s.spec.hosts = j.at("hosts").get<int>();
  s.spec.rate_bps = j.at("rate_bps").get<double>();
  s.spec.delay_ms = j.at("delay_ms").get<double>();
  s.spec.loss_percent = j.at("loss_percent").get<double>();
  if (j.contains("uplink_bps")) s.spec.uplink_bps = j.at("uplink_bps").get<double>();
  s.spec.host_sysctls = j.value("host_sysctls", std::vector<std::string>{});
  s.host_namespaces = j.at("host_namespaces").get<std::vector<std::string>>();
  s.addresses = j.at("addresses").get<std::vector<std::string>>();
  if (j.contains("impairment")) s.impairment = parse_impairment(j.at("impairment"));
  s.impairer_pid = j.value("impairer_pid", 0);
  if (static_cast<int>(s.addresses.size()) != s.spec.hosts ||
      static_cast<int>(s.host_namespaces.size()) != s.spec.hosts) {
    throw std::runtime_error("host lists do not match the host count");
  }
  return s;
}

// Tries a netem qdisc on the switch namespace's loopback and takes it away again.
bool kernel_has_netem(const std::string& lab) {
  const std::string ns = switch_namespace(lab);
  std::string output;
  if (run_capturing({"tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", "netem"}, output) != 0)
    return false;
  run_capturing({"tc", "-n", ns, "qdisc", "del", "dev", "lo", "root"}, output);
  return true;
}

Impairment choose_impairment(const std::string& lab) {
  const char* forced = std::getenv("DTRAIN_NETLAB_IMPAIR");
  if (forced != nullptr && *forced != '\0') {
    try {
      return parse_impairment(forced);
    } catch (const std::exception& e) {
      throw std::invalid_argument(std::string("netlab: DTRAIN_NETLAB_IMPAIR: ") + e.what());
    }
  }
  return kernel_has_netem(lab) ? Impairment::kNetem : Impairment::kNfqueue;
}

// Shapes the lab's links to `spec` and starts, restarts or stops the impairer to match.
// On success `state` describes the lab as it now is.
void apply_shape(LabState& state, const LabSpec& spec, bool first_time) {
  if (!state.impairment && impaired(spec)) state.impairment = choose_impairment(spec.name);
  const Impairment how = state.impairment.value_or(Impairment::kNetem);
  std::string version;
  if (how == Impairment::kNfqueue && impaired(spec) &&
      run_capturing({"iptables", "-V"}, version) != 0) {
    throw std::runtime_error(
        "netlab: this kernel has no netem, and delay and loss without it need iptables "
        "(scripts/install-deps.sh installs it)");
  }
  run_all(shape_commands(spec, first_time, how));
  if (how == Impairment::kNfqueue) {
    // The queue has one owner: the old impairer goes before the new one binds. Packets sent
    // in between are dropped (no listener); TCP sends them again.
    stop_impairer(state.impairer_pid);
    state.impairer_pid = 0;
    if (impaired(spec)) {
      ImpairerSpec impairer;
      impairer.namespace_name = switch_namespace(spec.name);
      impairer.delay_ms = spec.delay_ms;
      impairer.loss_percent = spec.loss_percent;
      impairer.seed = std::hash<std::string>{}(spec.name);
      impairer.log_path = impairer_log(spec.name);
      make_dirs(state_dir());
      state.impairer_pid = start_impairer(impairer);
    }
    run_all(nfqueue_commands(spec, kImpairQueue));
  }
  state.spec = spec;
}

void save(const LabState& s) {
  make_dirs(state_dir());
  const std::string path = state_file(s.spec.name);
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp);
    out << to_json(s).dump(2) << "\n";
    if (!out) throw std::runtime_error("netlab: cannot write " + temp);
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    throw std::runtime_error("netlab: cannot write " + path);
  }
}

// Blocks SIGINT/SIGTERM/SIGHUP while a lab is built, so an interruption cannot leave half
// a lab; `interrupted()` tells whether one arrived meanwhile. Restores the mask on exit
// (the pending signal is then delivered as usual).
class HeldSignals {
 public:
  HeldSignals() {
    sigemptyset(&held_);
    for (const int s : {SIGINT, SIGTERM, SIGHUP})
      sigaddset(&held_, s);
    sigprocmask(SIG_BLOCK, &held_, &old_);
  }
  ~HeldSignals() { sigprocmask(SIG_SETMASK, &old_, nullptr); }
  HeldSignals(const HeldSignals&) = delete;
  HeldSignals& operator=(const HeldSignals&) = delete;
  bool interrupted() const {
    sigset_t pending;
    sigpending(&pending);
    for (const int s : {SIGINT, SIGTERM, SIGHUP})
      if (sigismember(&pending, s) == 1) return true;
    return false;
  }

 private:
  sigset_t held_{}, old_{};
};

}  // namespace

std::string impairment_name(Impairment how) {
  return how == Impairment::kNetem ? "netem" : "nfqueue";
}

std::string state_dir() {
  const char* dir = std::getenv("DTRAIN_NETLAB_DIR");
  return dir != nullptr && *dir != '\0' ? dir : "/run/dtrain/netlab";
}

std::string namespace_path(const std::string& ns) {
  return "/run/netns/" + ns;
}

void require_lab_support() {
  if (geteuid() != 0) {
    throw std::runtime_error(
        "netlab: a network lab needs root (it creates network namespaces and tc qdiscs); run "
        "as root or with sudo");
  }
  std::string output;
  for (const char* tool : {"ip", "tc"}) {
    if (run_capturing({tool, "-V"}, output) != 0) {
      throw std::runtime_error(std::string("netlab: `") + tool +
                               "` is missing: install iproute2 (scripts/install-deps.sh does)");
    }
  }
}

LabState bring_up(const LabSpec& spec) {
  validate(spec);
  require_lab_support();
  if (exists(state_file(spec.name)) || !namespaces_of(spec.name).empty()) {
    throw std::runtime_error("netlab: a lab named '" + spec.name +
                             "' is up already (dtrain netlab down " + spec.name + ")");
  }
  LabState state;
  state.spec = spec;
  for (int k = 0; k < spec.hosts; ++k) {
    state.host_namespaces.push_back(host_namespace(spec.name, k));
    state.addresses.push_back(host_address(k));
  }
  const HeldSignals held;
  try {
    run_all(build_commands(spec));
    run_all(sysctl_commands(spec));
    apply_shape(state, spec, /*first_time=*/true);
    if (held.interrupted()) throw std::runtime_error("netlab: interrupted while building");
    save(state);
  } catch (...) {
    stop_impairer(state.impairer_pid);
    remove_lab(spec.name, /*best_effort=*/true);
    throw;
  }
  return state;
}

void tear_down(const std::string& name) {
  check_lab_name(name);
  require_lab_support();
  const auto namespaces = namespaces_of(name);
  const bool had_state = exists(state_file(name));
  if (namespaces.empty() && !had_state) {
    throw std::runtime_error("netlab: no lab named '" + name + "' is up");
  }
  remove_lab(name, /*best_effort=*/false);
}

LabState reshape(LabSpec spec) {
  LabState state = load(spec.name);
  require_lab_support();
  spec.hosts = state.spec.hosts;
  validate(spec);
  const LabSpec before = state.spec;
  try {
    run_all(sysctl_commands(spec));
    apply_shape(state, spec, /*first_time=*/false);
  } catch (...) {
    // Put the old shaping back (it worked before), so a refused change changes nothing.
    try {
      apply_shape(state, before, /*first_time=*/false);
      save(state);
    } catch (const std::exception&) {
      // The original error says more than this one.
    }
    throw;
  }
  save(state);
  return state;
}

void set_link(const std::string& name, int host, bool up) {
  const LabState state = load(name);
  require_lab_support();
  if (host < 0 || host >= state.spec.hosts) {
    throw std::invalid_argument("netlab: lab '" + name + "' has hosts 0.." +
                                std::to_string(state.spec.hosts - 1));
  }
  run(link_command(name, host, up));
}

LabState load(const std::string& name) {
  check_lab_name(name);
  std::ifstream in(state_file(name));
  if (!in) {
    throw std::runtime_error("netlab: no lab named '" + name +
                             "' is up (start one with "
                             "`dtrain netlab up " +
                             name + " --hosts N --rate R`)");
  }
  try {
    return from_json(nlohmann::json::parse(in));
  } catch (const std::exception& e) {
    throw std::runtime_error("netlab: " + state_file(name) + " is corrupt: " + e.what());
  }
}

std::vector<LabState> list_labs() {
  std::vector<LabState> out;
  DIR* dir = opendir(state_dir().c_str());
  if (dir == nullptr) return out;
  std::vector<std::string> names;
  while (const dirent* e = readdir(dir)) {
    const std::string n = e->d_name;
    if (n.size() > 5 && n.compare(n.size() - 5, 5, ".json") == 0)
      names.push_back(n.substr(0, n.size() - 5));
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  for (const auto& n : names)
    out.push_back(load(n));
  return out;
}

}  // namespace dtrain::netlab
