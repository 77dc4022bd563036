#include "pipelines/claims_rows.h"

#include <filesystem>

namespace txscore::pipelines {

Result<RowReader> RowReader::Open(const std::string& path, std::function<bool()> should_stop) {
  RowReader reader;
  reader.should_stop_ = std::move(should_stop);
  reader.csv_ = std::filesystem::path(path).extension() == ".csv";
  reader.in_.open(path, std::ios::binary);
  if (!reader.in_) return NotFound("input file " + path + " does not exist or cannot be read");
  // A UTF-8 byte order mark (as spreadsheet programs write) is not part of the first row.
  char bom[3] = {0, 0, 0};
  reader.in_.read(bom, 3);
  if (!(reader.in_.gcount() == 3 && bom[0] == '\xEF' && bom[1] == '\xBB' && bom[2] == '\xBF')) {
    reader.in_.clear();
    reader.in_.seekg(0);
  }
  if (reader.csv_) {
    std::optional<CsvRecord> header = reader.NextCsvRecord();
    if (!header || header->too_long) return InvalidArgument(path + ": the CSV file has no header row");
    Result<fraud::ClaimCsvHeader> parsed = fraud::ClaimCsvHeader::Parse(header->fields);
    if (!parsed.ok()) return InvalidArgument(path + ":1: " + parsed.error().message, parsed.error().field);
    reader.header_ = std::move(parsed).value();
  }
  return reader;
}

bool RowReader::Next(Row* row) {
  if (csv_) {
    std::optional<CsvRecord> record = NextCsvRecord();
    if (!record) return false;
    row->line = record->first_line;
    row->claim = record->too_long ? TooLong() : header_->Read(record->fields);
    return true;
  }
  std::string text;
  while (std::getline(in_, text)) {
    ++line_;
    if (StopAsked()) return false;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank
    row->line = line_;
    row->claim = text.size() > kMaxRowBytes ? TooLong() : fraud::ParseClaimJson(text);
    return true;
  }
  return false;
}

Result<fraud::RawClaim> RowReader::TooLong() {
  return InvalidArgument("the row is longer than " + std::to_string(kMaxRowBytes) +
                         " bytes (in a CSV file: is a quote left open?)");
}

bool RowReader::StopAsked() {
  if (!stopped_ && should_stop_ && should_stop_()) stopped_ = true;
  return stopped_;
}

// The next record: lines are added while a quote is open, which a running count of quote
// characters tells (an escaped quote is two), so each line is scanned once.
std::optional<RowReader::CsvRecord> RowReader::NextCsvRecord() {
  CsvRecord out;
  std::string record, text;
  bool started = false, in_quotes = false;
  while (std::getline(in_, text)) {
    ++line_;
    if (StopAsked()) return std::nullopt;
    if (!started && text.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (!started) out.first_line = line_;
    for (char c : text) in_quotes = in_quotes != (c == '"');
    if (!out.too_long) {
      if (started) record += '\n';
      record += text;
      if (record.size() > kMaxRowBytes) {
        out.too_long = true;
        std::string().swap(record);
      }
    }
    started = true;
    if (!in_quotes) break;
  }
  if (!started) return std::nullopt;
  if (!out.too_long) {
    bool complete = false;  // false only for an unclosed quote at the end of the file
    out.fields = fraud::SplitCsvRecord(record, &complete);
  }
  return out;
}

}  // namespace txscore::pipelines
