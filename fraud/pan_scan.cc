#include "fraud/pan_scan.h"

#include <vector>

#include "fraud/card_token.h"

namespace txscore::fraud {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsSeparator(char c) { return c == ' ' || c == '-' || c == '.' || c == '_'; }

// A maximal run starting at text[begin] (a digit): digits with single separators between
// them. Returns the end (one past the last digit) and collects the digits.
size_t RunEnd(std::string_view text, size_t begin, std::string* digits) {
  size_t end = begin;
  size_t i = begin;
  while (i < text.size()) {
    if (IsDigit(text[i])) {
      digits->push_back(text[i]);
      end = ++i;
    } else if (IsSeparator(text[i]) && i + 1 < text.size() && IsDigit(text[i + 1])) {
      ++i;
    } else {
      break;
    }
  }
  return end;
}

bool HoldsLuhnWindow(const std::string& digits) {
  for (size_t length = 12; length <= 19 && length <= digits.size(); ++length) {
    for (size_t start = 0; start + length <= digits.size(); ++start) {
      if (LuhnValid(std::string_view(digits).substr(start, length))) return true;
    }
  }
  return false;
}

// Calls `on_pan(begin, end)` for each PAN candidate run, in order.
template <typename F>
void ForEachPanRun(std::string_view text, F on_pan) {
  size_t i = 0;
  while (i < text.size()) {
    if (!IsDigit(text[i])) {
      ++i;
      continue;
    }
    std::string digits;
    const size_t end = RunEnd(text, i, &digits);
    if (digits.size() >= 12 && HoldsLuhnWindow(digits)) on_pan(i, end);
    i = end;
  }
}

}  // namespace

bool ContainsPan(std::string_view text) {
  bool found = false;
  ForEachPanRun(text, [&](size_t, size_t) { found = true; });
  return found;
}

std::string RedactPans(std::string_view text, int* redactions) {
  std::string out;
  size_t copied = 0;
  int count = 0;
  ForEachPanRun(text, [&](size_t begin, size_t end) {
    out.append(text.substr(copied, begin - copied));
    out.append(kRedactedPan);
    copied = end;
    ++count;
  });
  out.append(text.substr(copied));
  if (redactions != nullptr) *redactions = count;
  return out;
}

}  // namespace txscore::fraud
