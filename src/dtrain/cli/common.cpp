#include "dtrain/cli/common.h"

#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <limits>
#include <stdexcept>

#include "dtrain/base/names.h"
#include "dtrain/base/parse.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/launch.h"
#include "dtrain/comm/tcp_congestion.h"
#include "dtrain/metrics/keys.h"
#include "dtrain/netlab/lab.h"
#include "dtrain/report/html_report.h"

namespace dtrain::cli {
namespace {
std::vector<std::string>& saved_args() {
  static std::vector<std::string> args;
  return args;
}
}  // namespace

void set_program_args(int argc, char** argv) {
  saved_args().assign(argv, argv + argc);
}

const std::vector<std::string>& program_args() {
  return saved_args();
}

std::string self_executable() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return program_args().empty() ? "dtrain" : program_args()[0];
  std::string path(buf, static_cast<size_t>(n));
  // Rebuilt while running: the kernel marks the old inode; the path holds the new binary.
  const std::string deleted = " (deleted)";
  if (path.size() > deleted.size() &&
      path.compare(path.size() - deleted.size(), deleted.size(), deleted) == 0) {
    path.resize(path.size() - deleted.size());
  }
  return path;
}

void add_transformer_flags(CLI::App* app, models::TransformerConfig& t) {
  app->add_option("--layers", t.layers, "roberta: encoder layers")->capture_default_str();
  app->add_option("--hidden", t.hidden, "roberta: hidden size")->capture_default_str();
  app->add_option("--heads", t.heads, "roberta: attention heads")->capture_default_str();
  app->add_option("--ffn", t.ffn, "roberta: feed-forward size (default: 4 x --hidden)");
}

void add_rank_flags(CLI::App* app, RankFlags& flags, bool allow_list) {
  app->add_option("-n,--nprocs", flags.nprocs,
                  allow_list
                      ? "local ranks to launch; a list (2,4,6) sweeps world sizes"
                      : "local ranks to launch (this command re-runs itself under the launcher)");
  app->add_option("--master-addr", flags.master_addr, "rendezvous host (overrides MASTER_ADDR)");
  app->add_option("--master-port", flags.master_port, "rendezvous port (overrides MASTER_PORT)")
      ->check(CLI::Range(1, 65535));
  app->add_option("--gloo-host", flags.gloo_hostname,
                  "address or hostname Gloo binds to (default: loopback for a local master)");
  app->add_option("--gloo-iface", flags.gloo_interface,
                  "network interface Gloo binds to (e.g. eth0)");
  app->add_option("--timeout", flags.timeout_s, "seconds any blocking operation may take")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app->add_option("--token", flags.token,
                  "secret every rank must hold to join (overrides DTRAIN_TOKEN, which other "
                  "users cannot read in the process list)");
  app->add_option("--max-restarts", flags.max_restarts,
                  "with -n: when a rank fails, stop all and start all again, at most K times "
                  "(train: with --checkpoint-dir D --resume it goes on from the last checkpoint)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--netlab", flags.netlab,
                  "run rank k on host k of this network lab (dtrain netlab up NAME ...)");
  add_typed_option(
      app, "--bind", flags.bind_cores,
      [](const std::string& text) {
        if (text == "cores") return true;
        if (text == "none") return false;
        throw std::invalid_argument("'" + text + "' is not cores or none");
      },
      "cores: pin each local rank to its share of the cores (cores / local ranks, or its "
      "--threads) and let Gloo's I/O thread yield to compute on wakeup; none: leave both to "
      "the scheduler",
      "cores");
  add_typed_option(app, "--backend", flags.backend, comm::parse_collective_backend,
                   "who reduces CUDA tensors: nccl (on the GPU, one GPU per local rank), gloo "
                   "(through host memory) or auto (nccl where every local rank has a GPU of its "
                   "own); CPU tensors and dtrain's own algorithms always use Gloo");
  add_typed_option(
      app, "--streams", flags.streams,
      [](const std::string& text) -> std::optional<int> {
        if (text == "auto") return 0;
        const auto n = parse_integer(text, 1, comm::kMaxStreams);
        if (!n)
          throw std::invalid_argument("'" + text + "' is not auto or 1.." +
                                      std::to_string(comm::kMaxStreams));
        return static_cast<int>(*n);
      },
      "TCP connections per peer for large messages: auto (several where a link's round trip "
      "is 5 ms or more: one connection cannot fill a long fat link) or N (overrides "
      "DTRAIN_STREAMS)",
      "auto");
  add_typed_option(
      app, "--tcp-congestion", flags.tcp_congestion,
      [](const std::string& text) -> std::optional<std::string> {
        comm::check_tcp_congestion(text);
        return text;
      },
      "TCP congestion control of dtrain's connections, e.g. reno or cubic (bbr paces a "
      "collective's bursts at its last rate: a 1 MiB all-reduce at 100 ms one way took 168 ms "
      "under bbr, 131 with reno set here, 109 on hosts running reno; under loss bbr keeps its "
      "rate); overrides DTRAIN_TCP_CONGESTION",
      "the host's default");
  app->add_option("--results-file", flags.results_file)->group("");  // internal
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<int> parse_int_list(const std::string& text, const std::string& flag) {
  std::vector<int> out;
  for (const auto& item : split_list(text)) {
    const auto v = parse_integer(item, 1, std::numeric_limits<int>::max());
    if (!v) throw std::invalid_argument(flag + ": '" + item + "' is not a positive integer");
    out.push_back(static_cast<int>(*v));
  }
  if (out.empty() && !text.empty()) throw std::invalid_argument(flag + ": empty list");
  return out;
}

void add_output_flags(CLI::App* app, Output& output, const std::string& out_names, bool report) {
  add_typed_option(app, "--format", output.format, metrics::parse_format, "table, csv or jsonl");
  if (!out_names.empty())
    app->add_option(out_names, output.path, "write results to this file instead of stdout");
  if (report)
    app->add_option("--report", output.report_path,
                    "also write the results as an HTML page of charts (see dtrain report)");
}

std::vector<int> world_sizes(const RankFlags& flags) {
  return flags.nprocs.empty() ? std::vector<int>{} : parse_int_list(flags.nprocs, "-n");
}

comm::LaunchOptions relaunch_options(const RankFlags& flags, int n) {
  comm::LaunchOptions o;
  o.nprocs = n;
  o.max_restarts = flags.max_restarts;
  if (flags.master_addr) o.master_addr = *flags.master_addr;
  if (flags.master_port) o.master_port = *flags.master_port;
  if (flags.netlab) place_on_lab(*flags.netlab, o);
  o.command = program_args();
  o.command[0] = self_executable();
  return o;
}

std::optional<int> relaunch_if_requested(const RankFlags& flags, int n,
                                         const std::string& results_file) {
  if (comm::launched_by_environment()) return std::nullopt;
  if (flags.netlab && n < 2) {
    throw std::invalid_argument("--netlab " + *flags.netlab + " needs -n 2 or more ranks");
  }
  if (n <= 1 && results_file.empty()) return std::nullopt;
  comm::LaunchOptions o = relaunch_options(flags, n);
  if (!results_file.empty()) {
    o.command.push_back("--results-file");
    o.command.push_back(results_file);
  }
  return comm::launch(o);
}

void place_on_lab(const std::string& lab, comm::LaunchOptions& options) {
  const netlab::LabState state = netlab::load(lab);
  if (options.nprocs > state.spec.hosts) {
    throw std::invalid_argument("--netlab " + lab + " has " + std::to_string(state.spec.hosts) +
                                " hosts, fewer than the " + std::to_string(options.nprocs) +
                                " ranks asked for");
  }
  options.master_addr = state.addresses[0];
  options.placements.clear();
  for (int k = 0; k < options.nprocs; ++k) {
    const auto host = static_cast<size_t>(k);
    options.placements.push_back({netlab::namespace_path(state.host_namespaces[host]),
                                  {{"DTRAIN_GLOO_HOST", state.addresses[host]}}});
  }
}

comm::BackendDecision decide_backend(const RankFlags& flags, const c10::Device& device,
                                     int local_world_size) {
  return comm::resolve_backend(
      flags.backend, device, local_world_size,
      device.is_cuda() ? static_cast<int64_t>(torch::cuda::device_count()) : 0);
}

std::unique_ptr<comm::Group> join_world(const RankFlags& flags, int threads,
                                        const c10::Device& device) {
  comm::WorldOverrides o;
  o.bind_cores = flags.bind_cores;
  if (threads > 0) o.cores_per_rank = threads;
  o.master_addr = flags.master_addr;
  o.master_port = flags.master_port;
  o.gloo_hostname = flags.gloo_hostname;
  o.gloo_interface = flags.gloo_interface;
  o.timeout_s = flags.timeout_s;
  o.token = flags.token;
  o.streams = flags.streams;
  o.tcp_congestion = flags.tcp_congestion;
  if (!comm::launched_by_environment() && !flags.master_port) {
    o.master_port = comm::pick_free_port();  // a lone rank must not collide on 29500
  }
  comm::WorldConfig config = comm::world_from_env(o);
  const auto backend = decide_backend(flags, device, config.local_world_size);
  if (backend.backend == comm::CollectiveBackend::kNccl) config.nccl_device = device.index();
  if (device.is_cuda() && config.rank == 0)
    std::cerr << "collectives of CUDA tensors: " << comm::to_string(backend.backend) << " ("
              << backend.why << ")" << std::endl;
  at::set_num_threads(comm::threads_per_rank(config.local_world_size));
  return comm::connect(config);
}

int64_t parse_size(const std::string& text) {
  std::string t = text;
  if (!t.empty() && (t.back() == 'B' || t.back() == 'b')) t.pop_back();
  double mult = 1;
  if (!t.empty()) {
    switch (t.back()) {
      case 'K':
      case 'k':
        mult = 1024.0;
        break;
      case 'M':
      case 'm':
        mult = 1024.0 * 1024;
        break;
      case 'G':
      case 'g':
        mult = 1024.0 * 1024 * 1024;
        break;
      case 'T':
      case 't':
        mult = 1024.0 * 1024 * 1024 * 1024;
        break;
      default:
        break;
    }
    if (mult != 1) t.pop_back();
  }
  size_t used = 0;
  double v = -1;
  try {
    v = std::stod(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (t.empty() || used != t.size() || !(v >= 0) || !std::isfinite(v)) {
    throw std::invalid_argument("'" + text + "' is not a size (examples: 512, 4K, 16M, 1G)");
  }
  return static_cast<int64_t>(std::llround(v * mult));
}

std::vector<int64_t> parse_sizes(const std::string& spec, double factor) {
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) {
    std::vector<int64_t> out;
    for (const auto& item : split_list(spec))
      out.push_back(parse_size(item));
    if (out.empty()) throw std::invalid_argument("--sizes: empty");
    return out;
  }
  if (!(factor > 1)) throw std::invalid_argument("--factor must be greater than 1");
  const int64_t lo = parse_size(spec.substr(0, colon));
  const int64_t hi = parse_size(spec.substr(colon + 1));
  if (lo < 1 || hi < lo) throw std::invalid_argument("--sizes " + spec + ": need 1 <= MIN <= MAX");
  std::vector<int64_t> out;
  for (double s = static_cast<double>(lo); s <= static_cast<double>(hi) * (1 + 1e-9); s *= factor) {
    out.push_back(static_cast<int64_t>(std::llround(s)));
  }
  return out;
}

void emit_rows(const std::string& out_path, metrics::Format format,
               const std::vector<metrics::Column>& columns, const std::vector<metrics::Row>& rows) {
  if (out_path.empty()) {
    metrics::write_rows(std::cout, format, columns, rows);
    return;
  }
  std::ofstream out(out_path);
  if (!out) throw std::runtime_error("cannot write " + out_path);
  metrics::write_rows(out, format, columns, rows);
}

int run_ranked(const RankFlags& flags, const std::vector<int>& worlds, const Output& output,
               const std::function<std::vector<metrics::Row>(comm::Group&)>& body,
               const c10::Device& device) {
  const bool as_rank =
      comm::launched_by_environment() || worlds.empty() || (worlds.size() == 1 && worlds[0] == 1);
  if (as_rank) {
    auto group = join_world(flags, 0, device);
    const auto rows = body(*group);
    if (group->rank() != 0) return 0;
    if (!flags.results_file.empty()) {
      std::ofstream out(flags.results_file, std::ios::app);
      metrics::write_jsonl(out, rows);
      if (!out) throw std::runtime_error("cannot write " + flags.results_file);
    } else {
      emit_output(output, output.columns, rows);
    }
    return 0;
  }
  TempFile results("results");
  for (const int n : worlds) {
    const int status = *relaunch_if_requested(flags, n, results.path());
    if (status != 0) {
      std::cerr << "dtrain: the run with " << n << " ranks failed (status " << status << ")"
                << std::endl;
      return status;
    }
  }
  std::ifstream in(results.path());
  emit_output(output, output.columns, metrics::read_jsonl(in, results.path()));
  return 0;
}

void emit_output(const Output& output, const std::vector<metrics::Column>& columns,
                 std::vector<metrics::Row> rows) {
  stamp_command(rows);
  emit_rows(output.path, output.format, columns, rows);
  if (!output.report_path.empty()) write_rows_report(output.report_path, rows);
}

std::string command_line() {
  std::string out;
  const auto& args = program_args();
  for (size_t i = 0; i < args.size(); ++i) {
    std::string word = i == 0 ? "dtrain" : args[i];
    if (word.empty() || word.find_first_of(" \t'\"$`\\;&|<>()*?!#~") != std::string::npos) {
      std::string quoted = "'";
      for (const char ch : word)
        quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
      word = quoted + "'";
    }
    out += (out.empty() ? "" : " ") + word;
  }
  return out;
}

void stamp_command(std::vector<metrics::Row>& rows) {
  const std::string command = command_line();
  for (auto& row : rows) {
    if (row.is_object() && !row.contains(metrics::key::kCommand))
      row[metrics::key::kCommand] = command;
  }
}

void write_rows_report(const std::string& path, const std::vector<metrics::Row>& rows) {
  report::ReportOptions options;
  options.generated_by = command_line();
  const auto result = report::write_report(path, {{"this run", rows, {}}}, options);
  std::cerr << "report: " << path << " (" << result.charts << " charts)" << std::endl;
}

TempFile::TempFile(const std::string& stem) {
  std::string templ = "/tmp/dtrain-" + stem + "-XXXXXX";
  const int fd = mkstemp(templ.data());
  if (fd < 0) throw std::runtime_error("cannot create a temporary file in /tmp");
  close(fd);
  path_ = templ;
}

TempFile::~TempFile() {
  unlink(path_.c_str());
}

namespace {
// The canonical name of each type comes first (dtype_name prints it); then the aliases.
const EnumNames<at::ScalarType> kDtypeNames("dtype", {{at::kFloat, "float32"},
                                                      {at::kDouble, "float64"},
                                                      {at::kHalf, "float16"},
                                                      {at::kBFloat16, "bfloat16"},
                                                      {at::kInt, "int32"},
                                                      {at::kLong, "int64"},
                                                      {at::kFloat, "float"},
                                                      {at::kDouble, "double"},
                                                      {at::kHalf, "half"}});
}  // namespace

at::ScalarType parse_dtype(const std::string& s) {
  try {
    return kDtypeNames.parse(s);
  } catch (const std::invalid_argument&) {  // name the canonical choices only
    throw std::invalid_argument("--dtype '" + s +
                                "': expected float32, float64, float16, bfloat16, int32 or int64");
  }
}

std::string dtype_name(at::ScalarType t) {
  return kDtypeNames.to_string(t);
}

}  // namespace dtrain::cli
