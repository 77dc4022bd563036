#include "fraud/pan_scan.h"

#include <cctype>
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

// Whether `digits` starts with an issuer prefix of a network that issues this length.
bool IssuedLength(const std::string& digits) {
  struct Range {
    int prefix_digits;
    int low, high;  // prefix range, inclusive
    size_t min_length, max_length;
  };
  static constexpr Range kRanges[] = {
      {1, 4, 4, 13, 13},       {1, 4, 4, 16, 16},       {1, 4, 4, 19, 19},    // Visa
      {2, 51, 55, 16, 16},     {4, 2221, 2720, 16, 16},                       // Mastercard
      {2, 34, 34, 15, 15},     {2, 37, 37, 15, 15},                           // Amex
      {3, 300, 305, 14, 19},   {2, 36, 36, 14, 19},     {2, 38, 39, 14, 19},  // Diners
      {4, 3528, 3589, 16, 19},                                                // JCB
      {4, 6011, 6011, 16, 19}, {3, 644, 649, 16, 19},   {2, 65, 65, 16, 19},  // Discover
      {2, 62, 62, 16, 19},                                                    // UnionPay
      {4, 2200, 2204, 16, 19},                                                // Mir
      {2, 50, 50, 13, 19},     {2, 56, 69, 13, 19},                           // Maestro, but its rare 12-digit cards
  };
  for (const Range& r : kRanges) {
    if (digits.size() < r.min_length || digits.size() > r.max_length) continue;
    const int prefix = std::stoi(digits.substr(0, static_cast<size_t>(r.prefix_digits)));
    if (prefix >= r.low && prefix <= r.high) return true;
  }
  return false;
}

}  // namespace

bool LooksLikeCardNumber(std::string_view text) {
  auto card_shaped = [](const std::string& digits) {
    return digits.size() >= 12 && digits.size() <= 19 && IssuedLength(digits) && LuhnValid(digits);
  };
  size_t i = 0;
  while (i < text.size()) {
    if (!IsDigit(text[i])) {
      ++i;
      continue;
    }
    // The run's groups of contiguous digits, split at single separators.
    std::vector<std::string> groups(1);
    size_t end = i;
    while (end < text.size()) {
      if (IsDigit(text[end])) {
        groups.back().push_back(text[end++]);
      } else if (IsSeparator(text[end]) && end + 1 < text.size() && IsDigit(text[end + 1])) {
        groups.emplace_back();
        ++end;
      } else {
        break;
      }
    }
    // A number stands apart: no letter or digit right before or after it. Digits glued to
    // letters are part of a word, as in hex ids (UUIDs, trace ids, object ids), whose digit
    // runs would otherwise look like cards now and then. Groups joined by separators are one
    // number only as cards are printed (4-4-4-4, 4-4-4-4-3, Amex 4-6-5); otherwise, as a
    // date's or a UUID's groups, each group is a number of its own.
    auto alnum = [&text](size_t at) { return std::isalnum(static_cast<unsigned char>(text[at])) != 0; };
    const bool apart_before = i == 0 || !alnum(i - 1);
    const bool apart_after = end == text.size() || !alnum(end);
    // Every stretch of groups printed as a card is tried, joined (a card number may stand
    // between other numbers of the same id: "ORD-2026-4000-0012-3456-7899").
    auto joined_from = [&groups](size_t first, size_t count) {
      std::string digits;
      for (size_t g = first; g < first + count; ++g) digits += groups[g];
      return digits;
    };
    for (size_t first = 0; first < groups.size(); ++first) {
      if (first == 0 && !apart_before) continue;
      const size_t left = groups.size() - first;
      auto apart_at_end = [&](size_t count) { return first + count < groups.size() || apart_after; };
      const bool amex =
          left >= 3 && groups[first].size() == 4 && groups[first + 1].size() == 6 && groups[first + 2].size() == 5;
      if (amex && apart_at_end(3) && card_shaped(joined_from(first, 3))) return true;
      bool fours = left >= 4;
      for (size_t g = first; fours && g < first + 4; ++g) fours = groups[g].size() == 4;
      if (!fours) continue;
      if (apart_at_end(4) && card_shaped(joined_from(first, 4))) return true;
      if (left >= 5 && groups[first + 4].size() <= 3 && apart_at_end(5) && card_shaped(joined_from(first, 5))) {
        return true;  // 19 digits, printed 4-4-4-4-3
      }
    }
    for (size_t g = 0; g < groups.size(); ++g) {
      const bool apart = (g > 0 || apart_before) && (g + 1 < groups.size() || apart_after);
      if (apart && card_shaped(groups[g])) return true;
    }
    i = end;
  }
  return false;
}

Status RefuseCardNumberIn(std::string_view value, const char* field) {
  if (!LooksLikeCardNumber(value)) return Status::Ok();
  return InvalidArgument(
      "holds what looks like a card number (a Luhn-valid run of digits with a card network's prefix and length); "
      "card numbers belong in card_number only",
      field);
}

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
