// The extension tables (codecs, models, pipeline schedules): each row an object defined in
// its own file, the table one list of the rows' names. DTRAIN_TABLE(Row, function, LIST)
// declares every row of LIST (an X-macro: LIST(ROW) expands ROW(name) once per row) and
// defines `const std::vector<const Row*>& function()` returning their addresses in order.
#pragma once

#include <vector>

#define DTRAIN_TABLE_DECLARE_ROW_(Row, name) extern const Row name;
#define DTRAIN_TABLE_ADDRESS_(Row, name) &name,

#define DTRAIN_TABLE(Row, function, LIST)                                         \
  LIST(DTRAIN_TABLE_DECLARE_ROW_, Row)                                            \
  const std::vector<const Row*>& function() {                                     \
    static const std::vector<const Row*> table{LIST(DTRAIN_TABLE_ADDRESS_, Row)}; \
    return table;                                                                 \
  }
