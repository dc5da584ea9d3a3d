#include "dtrain/metrics/rows.h"

#include "dtrain/base/names.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <istream>
#include <ostream>
#include <sstream>
#include <stdexcept>

namespace dtrain::metrics {
namespace {

std::string cell(const Row& row, const Column& c) {
  if (!row.contains(c.key) || row[c.key].is_null()) return "-";
  const auto& v = row[c.key];
  if (v.is_number_float() && c.precision >= 0) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(c.precision) << v.get<double>();
    return s.str();
  }
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"') out += '"';
    out += ch;
  }
  return out + "\"";
}

}  // namespace

namespace {
const EnumNames<Format> kFormatNames("format", {{Format::kTable, "table"},
                                                {Format::kCsv, "csv"},
                                                {Format::kJsonl, "jsonl"}});
}

Format parse_format(const std::string& name) {
  return kFormatNames.parse(name);
}

std::string to_string(Format format) {
  return kFormatNames.to_string(format);
}

void write_table(std::ostream& out, const std::vector<Column>& columns,
                 const std::vector<Row>& rows) {
  std::vector<size_t> width;
  for (const auto& c : columns)
    width.push_back(c.header.size());
  std::vector<std::vector<std::string>> cells;
  for (const auto& row : rows) {
    cells.emplace_back();
    for (size_t i = 0; i < columns.size(); ++i) {
      cells.back().push_back(cell(row, columns[i]));
      width[i] = std::max(width[i], cells.back().back().size());
    }
  }
  auto line = [&](const std::vector<std::string>& values) {
    for (size_t i = 0; i < values.size(); ++i) {
      out << (i ? "  " : "") << std::setw(static_cast<int>(width[i])) << values[i];
    }
    out << '\n';
  };
  std::vector<std::string> headers;
  for (const auto& c : columns)
    headers.push_back(c.header);
  line(headers);
  for (const auto& values : cells)
    line(values);
  out.flush();
}

void write_csv(std::ostream& out, const std::vector<Column>& columns,
               const std::vector<Row>& rows) {
  for (size_t i = 0; i < columns.size(); ++i)
    out << (i ? "," : "") << columns[i].key;
  out << '\n';
  for (const auto& row : rows) {
    for (size_t i = 0; i < columns.size(); ++i) {
      const std::string v =
          row.contains(columns[i].key) && !row[columns[i].key].is_null()
              ? (row[columns[i].key].is_string() ? row[columns[i].key].get<std::string>()
                                                 : row[columns[i].key].dump())
              : "";
      out << (i ? "," : "") << csv_escape(v);
    }
    out << '\n';
  }
  out.flush();
}

void write_jsonl(std::ostream& out, const std::vector<Row>& rows) {
  for (const auto& row : rows)
    out << row.dump() << '\n';
  out.flush();
}

void write_rows(std::ostream& out, Format format, const std::vector<Column>& columns,
                const std::vector<Row>& rows) {
  switch (format) {
    case Format::kTable:
      write_table(out, columns, rows);
      return;
    case Format::kCsv:
      write_csv(out, columns, rows);
      return;
    case Format::kJsonl:
      write_jsonl(out, rows);
      return;
  }
}

std::vector<Row> read_jsonl(std::istream& in, const std::string& name) {
  std::vector<Row> rows;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    try {
      rows.push_back(Row::parse(line));
    } catch (const std::exception& e) {
      throw std::runtime_error(name + ":" + std::to_string(n) + ": not a JSON object: " + e.what());
    }
  }
  return rows;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s;
  for (int64_t d : shape)
    s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  std::ostringstream s;
  s << (std::floor(bytes) == bytes ? std::setprecision(0) : std::setprecision(1)) << std::fixed
    << bytes << ' ' << units[u];
  return s.str();
}

}  // namespace dtrain::metrics
