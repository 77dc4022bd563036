// The rows of a claims job's input file (pipelines/claims_job.h): each row's line number, and
// its claim or why there is none.
//
// Formats: JSON lines (one claim object per line, fraud::ParseClaimJson; blank lines are
// skipped and keep their numbers), or, for a file ending in .csv, CSV with a header row
// (fraud::ClaimCsvHeader; a quoted field may span lines, and the row is numbered by the line
// it starts on). A UTF-8 byte order mark before the first row is ignored. A row longer than
// RowReader::kMaxRowBytes becomes an error row and the next row is read as usual.
//
// Thread safety: a RowReader is used by one thread at a time; its `should_stop` callback runs
// on that thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "fraud/claim.h"

namespace txscore::pipelines {

// One input row: the line it starts on (1-based), and the claim or why there is none.
struct Row {
  int64_t line = 0;
  Result<fraud::RawClaim> claim = InvalidArgument("unread");
};

// Reads rows in time linear in the file's size. `should_stop` (optional), checked at every
// line, ends the reading early when it returns true (stopped() then says so): a stop needs no
// row to end.
class RowReader {
 public:
  static constexpr size_t kMaxRowBytes = 1 << 20;

  // Errors: the file missing or unreadable (kNotFound); a CSV file without a header row or
  // with a header fraud::ClaimCsvHeader refuses (kInvalidArgument, "PATH:1: ...").
  static Result<RowReader> Open(const std::string& path, std::function<bool()> should_stop = nullptr);

  // Fills `row` with the next row. False at the end of the input, or when stopped.
  bool Next(Row* row);

  bool stopped() const { return stopped_; }

 private:
  struct CsvRecord {
    int64_t first_line = 0;
    std::vector<std::string> fields;
    bool too_long = false;  // over kMaxRowBytes: skipped, fields empty
  };

  RowReader() = default;

  static Result<fraud::RawClaim> TooLong();
  bool StopAsked();
  std::optional<CsvRecord> NextCsvRecord();

  std::ifstream in_;
  bool csv_ = false;
  int64_t line_ = 0;
  std::optional<fraud::ClaimCsvHeader> header_;
  std::function<bool()> should_stop_;
  bool stopped_ = false;
};

}  // namespace txscore::pipelines
