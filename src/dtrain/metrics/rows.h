// Result rows and their writers: an aligned table for people, CSV and JSON lines for tools.
// A row is a JSON object whose keys are the stable machine names; a Column maps a key to a
// human header and a number format.
#pragma once

#include <nlohmann/json.hpp>

#include <iosfwd>
#include <string>
#include <vector>

namespace dtrain::metrics {

using Row = nlohmann::ordered_json;

enum class Format { kTable, kCsv, kJsonl };
Format parse_format(const std::string& name);  // "table", "csv", "jsonl"
std::string to_string(Format format);

struct Column {
  std::string key;
  std::string header;
  int precision = -1;  // digits after the point for floating values; -1: as is
};

// Table: headers, then one aligned line per row; missing keys print as "-".
void write_table(std::ostream& out, const std::vector<Column>& columns,
                 const std::vector<Row>& rows);
// CSV: header line of keys, then values; all keys of the columns, in column order.
void write_csv(std::ostream& out, const std::vector<Column>& columns, const std::vector<Row>& rows);
// JSON lines: every key of every row, one object per line.
void write_jsonl(std::ostream& out, const std::vector<Row>& rows);

void write_rows(std::ostream& out, Format format, const std::vector<Column>& columns,
                const std::vector<Row>& rows);

// Reads JSON lines; throws std::runtime_error naming the line on malformed input.
std::vector<Row> read_jsonl(std::istream& in, const std::string& name);

// "64x32x28x28" (empty string for a scalar)
std::string shape_string(const std::vector<int64_t>& shape);

// "16 MiB", "1 KiB", "12 B"
std::string human_bytes(double bytes);

}  // namespace dtrain::metrics
