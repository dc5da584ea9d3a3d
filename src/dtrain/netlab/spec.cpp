#include "dtrain/netlab/spec.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace dtrain::netlab {
namespace {

// The number at the start of `text` and the rest, lower-cased; throws when there is none.
std::pair<double, std::string> split_number(const std::string& text, const std::string& what) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used == 0 || !std::isfinite(value) || std::isspace(text[0])) {
    throw std::invalid_argument("'" + text + "' is not a " + what);
  }
  std::string unit = text.substr(used);
  for (auto& c : unit)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return {value, unit};
}

}  // namespace

double parse_rate(const std::string& text) {
  const std::string what = "rate (examples: 100mbit, 1gbit, 500kbit)";
  const auto [value, unit] = split_number(text, what);
  double scale = 0;
  if (unit.empty() || unit == "bit" || unit == "bps") scale = 1;
  if (unit == "kbit") scale = 1e3;
  if (unit == "mbit") scale = 1e6;
  if (unit == "gbit") scale = 1e9;
  if (scale == 0) throw std::invalid_argument("'" + text + "' is not a " + what);
  const double bps = value * scale;
  if (!(bps >= 8000) || bps > 100e9) {
    throw std::invalid_argument("rate '" + text + "' is outside 8kbit..100gbit");
  }
  return bps;
}

double parse_delay_ms(const std::string& text) {
  const std::string what = "delay (examples: 5ms, 200us, 1s)";
  const auto [value, unit] = split_number(text, what);
  double scale = 0;
  if (unit.empty() || unit == "ms") scale = 1;
  if (unit == "us") scale = 1e-3;
  if (unit == "s") scale = 1e3;
  if (scale == 0) throw std::invalid_argument("'" + text + "' is not a " + what);
  const double ms = value * scale;
  if (!(ms >= 0) || ms > 10'000)
    throw std::invalid_argument("delay '" + text + "' is outside 0..10s");
  return ms;
}

double parse_loss_percent(const std::string& text) {
  const std::string what = "loss percentage (examples: 2%, 0.5%)";
  const auto [value, unit] = split_number(text, what);
  if (!unit.empty() && unit != "%") throw std::invalid_argument("'" + text + "' is not a " + what);
  if (!(value >= 0) || !(value < 100)) {
    throw std::invalid_argument("loss '" + text + "' is outside [0%, 100%)");
  }
  return value;
}

void check_lab_name(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 16 && std::islower(static_cast<unsigned char>(name[0]));
  for (const char c : name)
    ok = ok && (std::islower(static_cast<unsigned char>(c)) ||
                std::isdigit(static_cast<unsigned char>(c)) || c == '-');
  if (!ok) {
    throw std::invalid_argument("lab name '" + name +
                                "': use 1-16 lower-case letters, digits or '-', starting with "
                                "a letter");
  }
}

void check_host_sysctl(const std::string& setting) {
  const size_t equals = setting.find('=');
  const std::string key = setting.substr(0, equals);
  bool ok = equals != std::string::npos && key.rfind("net.", 0) == 0 && key.back() != '.' &&
            key.find("..") == std::string::npos &&
            setting.find('\n', equals) == std::string::npos && equals + 1 < setting.size();
  for (const char c : key)
    ok = ok && (std::islower(static_cast<unsigned char>(c)) ||
                std::isdigit(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.');
  if (!ok) {
    throw std::invalid_argument("--sysctl '" + setting +
                                "': give net.<key>=<value> (a host's network settings, e.g. "
                                "net.ipv4.tcp_slow_start_after_idle=0)");
  }
}

std::vector<std::string> merge_host_sysctls(std::vector<std::string> settings,
                                            const std::vector<std::string>& changes) {
  const auto key = [](const std::string& s) { return s.substr(0, s.find('=')); };
  for (const auto& change : changes) {
    const auto same = std::find_if(settings.begin(), settings.end(),
                                   [&](const std::string& s) { return key(s) == key(change); });
    if (same == settings.end()) {
      settings.push_back(change);
    } else {
      *same = change;
    }
  }
  return settings;
}

void validate(const LabSpec& spec) {
  check_lab_name(spec.name);
  for (const auto& setting : spec.host_sysctls)
    check_host_sysctl(setting);
  if (spec.hosts < 2 || spec.hosts > kMaxHosts) {
    throw std::invalid_argument("--hosts " + std::to_string(spec.hosts) + ": a lab has 2.." +
                                std::to_string(kMaxHosts) + " hosts");
  }
}

std::string tc_rate(double bps) {
  return std::to_string(std::llround(bps)) + "bit";
}

std::string human_rate(double bps) {
  if (bps <= 0) return "unshaped";
  std::ostringstream out;
  out.precision(4);
  if (bps >= 1e9) {
    out << bps / 1e9 << " Gbit/s";
  } else if (bps >= 1e6) {
    out << bps / 1e6 << " Mbit/s";
  } else {
    out << bps / 1e3 << " kbit/s";
  }
  return out.str();
}

std::string host_address(int host) {
  return "10.200.0." + std::to_string(host + 1);
}

}  // namespace dtrain::netlab
