#include "dtrain/metrics/trace.h"

#include <atomic>
#include <fstream>
#include <memory>
#include <mutex>
#include <stdexcept>

namespace dtrain::metrics::trace {
namespace {

struct Buffer {
  std::mutex mutex;
  Track track;
};

struct Registry {
  std::atomic<bool> on{false};
  std::mutex mutex;
  std::vector<std::shared_ptr<Buffer>> buffers;  // kept after their thread ends
};

Registry& registry() {
  static Registry r;
  return r;
}

// This thread's buffer, registered on first use.
Buffer& own_buffer() {
  thread_local std::shared_ptr<Buffer> buffer;
  if (!buffer) {
    buffer = std::make_shared<Buffer>();
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    buffer->track.thread = static_cast<int>(r.buffers.size());
    buffer->track.name = "thread " + std::to_string(buffer->track.thread);
    r.buffers.push_back(buffer);
  }
  return *buffer;
}

void append(const Event& e) {
  Buffer& b = own_buffer();
  std::lock_guard<std::mutex> lock(b.mutex);
  b.track.events.push_back(e);
}

}  // namespace

void start() {
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    for (auto& b : r.buffers) {
      std::lock_guard<std::mutex> inner(b->mutex);
      b->track.events.clear();
    }
  }
  r.on.store(true, std::memory_order_relaxed);
}

void stop() {
  registry().on.store(false, std::memory_order_relaxed);
}

bool recording() {
  return registry().on.load(std::memory_order_relaxed);
}

int64_t to_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

void name_thread(const std::string& name) {
  Buffer& b = own_buffer();
  std::lock_guard<std::mutex> lock(b.mutex);
  b.track.name = name;
}

double span_since(const char* category, const char* name, Clock::time_point begin, int64_t index,
                  const char* index_name) {
  const auto end = Clock::now();
  if (recording()) append({category, name, to_ns(begin), to_ns(end), index, index_name});
  return std::chrono::duration<double>(end - begin).count();
}

Span::Span(const char* category, const char* name, int64_t index, const char* index_name)
    : category_(category), name_(name), index_(index), index_name_(index_name), on_(recording()) {
  if (on_) begin_ = Clock::now();
}

Span::~Span() {
  if (on_) span_since(category_, name_, begin_, index_, index_name_);
}

std::vector<Track> collect() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<Track> out;
  for (auto& b : r.buffers) {
    std::lock_guard<std::mutex> inner(b->mutex);
    if (!b->track.events.empty()) out.push_back(b->track);
  }
  return out;
}

nlohmann::json to_events(const std::vector<Track>& tracks, int pid, int64_t origin_ns,
                         int64_t offset_ns) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"ph", "M"},
                    {"name", "process_name"},
                    {"pid", pid},
                    {"tid", 0},
                    {"ts", 0},
                    {"args", {{"name", "rank " + std::to_string(pid)}}}});
  events.push_back({{"ph", "M"},
                    {"name", "process_sort_index"},
                    {"pid", pid},
                    {"tid", 0},
                    {"ts", 0},
                    {"args", {{"sort_index", pid}}}});
  for (const auto& t : tracks) {
    events.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", pid},
                      {"tid", t.thread},
                      {"ts", 0},
                      {"args", {{"name", t.name}}}});
    for (const auto& e : t.events) {
      nlohmann::json event = {{"ph", "X"},
                              {"cat", e.category},
                              {"name", e.name},
                              {"pid", pid},
                              {"tid", t.thread},
                              {"ts", static_cast<double>(e.begin_ns + offset_ns - origin_ns) / 1e3},
                              {"dur", static_cast<double>(e.end_ns - e.begin_ns) / 1e3}};
      if (e.index >= 0) event["args"] = {{e.index_name, e.index}};
      events.push_back(std::move(event));
    }
  }
  return events;
}

int64_t write_file(const std::string& path, const nlohmann::json& events,
                   const nlohmann::json& other_data) {
  std::ofstream out(path);
  out << nlohmann::json{{"traceEvents", events},
                        {"displayTimeUnit", "ms"},
                        {"otherData", other_data}}
             .dump()
      << "\n";
  if (!out) throw std::runtime_error("cannot write " + path);
  int64_t spans = 0;
  for (const auto& e : events)
    spans += e.value("ph", std::string()) == "X" ? 1 : 0;
  return spans;
}

}  // namespace dtrain::metrics::trace
