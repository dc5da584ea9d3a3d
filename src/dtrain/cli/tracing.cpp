#include "dtrain/cli/tracing.h"

#include <iostream>

#include "dtrain/cli/common.h"
#include "dtrain/comm/group.h"
#include "dtrain/metrics/trace.h"

namespace dtrain::cli {

TraceSession::TraceSession(std::string path, comm::Group* group)
    : path_(std::move(path)), group_(group) {
  if (path_.empty()) return;
  metrics::trace::start();
  metrics::trace::name_thread("main");
  if (group_ != nullptr && group_->size() > 1) {
    sync_ = comm::synchronize_clocks(*group_);
  } else {
    sync_.origin_ns = metrics::trace::to_ns(metrics::Clock::now());
  }
}

void TraceSession::finish() {
  if (path_.empty()) return;
  metrics::trace::stop();
  nlohmann::json other{{"command", command_line()}};
  if (group_ != nullptr && group_->size() > 1) {
    events_ = comm::gather_trace_events(*group_, sync_, other);
    if (group_->rank() != 0) return;
  } else {
    events_ = metrics::trace::to_events(metrics::trace::collect(), 0, sync_.origin_ns, 0);
  }
  const int64_t spans = metrics::trace::write_file(path_, events_, other);
  std::cerr << "trace: " << path_ << " (" << spans
            << " events; open in https://ui.perfetto.dev or chrome://tracing)" << std::endl;
}

}  // namespace dtrain::cli
