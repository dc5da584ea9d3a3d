// Flags and plumbing shared by the subcommands: rank/rendezvous flags, list and size
// parsing, re-launching this binary on N local ranks, and result output.
#pragma once

#include <c10/core/ScalarType.h>

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/comm/collective_backend.h"
#include "dtrain/comm/world.h"
#include "dtrain/metrics/rows.h"
#include "dtrain/models/registry.h"

namespace dtrain::comm {
class Group;
struct LaunchOptions;
}  // namespace dtrain::comm

namespace dtrain::cli {

// The process's own argv, saved by main() so -n can re-launch it.
void set_program_args(int argc, char** argv);
const std::vector<std::string>& program_args();
std::string self_executable();

struct RankFlags {
  std::string nprocs;  // "-n 4" or, where a subcommand sweeps world sizes, "2,4,6"
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
  std::optional<std::string> gloo_hostname;
  std::optional<std::string> gloo_interface;
  double timeout_s = 300;
  std::optional<std::string> token;   // overrides DTRAIN_TOKEN
  int max_restarts = 0;               // -n: the launcher restarts a failed job this often
  std::optional<std::string> netlab;  // run rank k on host k of this network lab
  bool bind_cores = true;             // --bind cores|none (comm/core_binding.h)
  // --backend: who runs the collectives of CUDA tensors (comm/collective_backend.h)
  comm::CollectiveBackend backend = comm::CollectiveBackend::kAuto;
  std::optional<int> streams;  // --streams: connections per peer (0: auto; comm/world.h)
  std::optional<std::string> tcp_congestion;  // --tcp-congestion (comm/tcp_congestion.h)
  std::string results_file;  // internal: where rank 0 appends its rows for the launcher
};

// A flag parsed once, at the boundary, into a typed value (an enum, a codec spec) by
// `parse`; a bad value is an error naming the flag. --help shows `shown` as the default.
template <typename T, typename Parse>
CLI::Option* add_typed_option(CLI::App* app, const std::string& name, T& target, Parse parse,
                              const std::string& help, const std::string& shown) {
  const std::string flag = name.substr(0, name.find(','));
  auto* option = app->add_option_function<std::string>(
      name,
      [&target, parse, flag](const std::string& text) {
        try {
          target = parse(text);
        } catch (const std::invalid_argument& e) {
          throw std::invalid_argument(flag + ": " + e.what());
        }
      },
      help);
  if (!shown.empty()) option->default_str(shown);
  return option;
}
// The same, showing the current value (printed by its to_string) as the default.
template <typename T, typename Parse>
CLI::Option* add_typed_option(CLI::App* app, const std::string& name, T& target, Parse parse,
                              const std::string& help) {
  return add_typed_option(app, name, target, parse, help, to_string(target));
}

// -n, --master-addr, --master-port, --gloo-host, --gloo-iface, --timeout, --token, --netlab.
void add_rank_flags(CLI::App* app, RankFlags& flags, bool allow_list);

// --layers, --hidden, --heads, --ffn: a transformer's sizes (roberta-base by default).
void add_transformer_flags(CLI::App* app, models::TransformerConfig& config);

// Parsed -n values (empty when -n was not given).
std::vector<int> world_sizes(const RankFlags& flags);

// If -n asks for more than one rank and this process is not already a launched rank,
// runs this same command line on n local ranks (adding --results-file when given) and
// returns the launcher's exit status; otherwise returns nullopt: go on as a rank.
// The launcher's options for n local ranks of this very command (its flags, lab, port).
comm::LaunchOptions relaunch_options(const RankFlags& flags, int n);
std::optional<int> relaunch_if_requested(const RankFlags& flags, int n,
                                         const std::string& results_file = "");

// Places rank k on host k of the network lab `lab` (entering its namespace, binding Gloo to
// its address) with the rendezvous on host 0. Throws when the lab is not up or has fewer
// hosts than ranks.
void place_on_lab(const std::string& lab, comm::LaunchOptions& options);

// --backend for `device` with `local_world_size` ranks on this host (comm/collective_backend.h):
// throws std::invalid_argument where it cannot run. Subcommands call it before launching.
comm::BackendDecision decide_backend(const RankFlags& flags, const c10::Device& device,
                                     int local_world_size);

// Rendezvous for this process (world size 1 when not launched) and per-rank intra-op
// threads. With --bind cores, the rank is pinned to `threads` cores (0: its share of the
// host's). `device`: where the rank's collectives' tensors live, for --backend (NCCL for a
// GPU per rank); rank 0 says on stderr which backend a CUDA device got and why.
std::unique_ptr<comm::Group> join_world(const RankFlags& flags, int threads = 0,
                                        const c10::Device& device = c10::Device(c10::kCPU));

// "4K" -> 4096; K, M, G, T binary; optional trailing B ("16MB"); throws on bad input.
int64_t parse_size(const std::string& text);
// "1K:1G" with factor, "16M", or "4K,16M".
std::vector<int64_t> parse_sizes(const std::string& spec, double factor);
std::vector<std::string> split_list(const std::string& text);
std::vector<int> parse_int_list(const std::string& text, const std::string& flag);
// --dtype: float32 (float), float64 (double), float16 (half), bfloat16, int32, int64;
// std::invalid_argument otherwise. dtype_name prints the first of each.
at::ScalarType parse_dtype(const std::string& text);
std::string dtype_name(at::ScalarType type);

// Runs `body` as one rank of a job and prints rank 0's rows: directly when this process is
// a launched rank (or -n is absent), else by launching this command line once per world
// size in `worlds` and collecting rank 0's rows from each run. Returns the exit status.
struct Output {
  std::string path;  // empty: stdout
  metrics::Format format = metrics::Format::kTable;
  std::vector<metrics::Column> columns;
  std::string report_path;  // --report: an HTML page of the rows too
};
// --format (table, csv, jsonl), unless `out_names` is empty the output file flag, and unless
// `report` is false --report FILE.html.
void add_output_flags(CLI::App* app, Output& output, const std::string& out_names = "--out",
                      bool report = true);
int run_ranked(const RankFlags& flags, const std::vector<int>& worlds, const Output& output,
               const std::function<std::vector<metrics::Row>(comm::Group&)>& body,
               const c10::Device& device = c10::Device(c10::kCPU));

// Writes rows in the chosen format to `out_path` (or stdout when empty).
void emit_rows(const std::string& out_path, metrics::Format format,
               const std::vector<metrics::Column>& columns, const std::vector<metrics::Row>& rows);
// The results of a command: rows stamped with the command line, written as `output` says
// (file or stdout, format), and the HTML report when --report was given.
void emit_output(const Output& output, const std::vector<metrics::Column>& columns,
                 std::vector<metrics::Row> rows);

// The command line as a user would type it again ("dtrain bench p2p -n 2 ..."), for the
// provenance of results: every JSON line dtrain writes carries it as "command".
std::string command_line();
// Adds "command" to the rows that lack it.
void stamp_command(std::vector<metrics::Row>& rows);
// Writes the HTML report of `rows` (metrics/html_report.h) and says where on stderr.
void write_rows_report(const std::string& path, const std::vector<metrics::Row>& rows);

// A temporary file path, removed on destruction.
class TempFile {
 public:
  explicit TempFile(const std::string& stem);
  ~TempFile();
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace dtrain::cli
