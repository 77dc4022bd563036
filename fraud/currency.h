// ISO 4217 currency codes and the number of digits in their minor unit.
#pragma once

#include <optional>
#include <string_view>

namespace txscore::fraud {

// Returns the minor-unit exponent (2 for USD, 0 for JPY, 3 for BHD), or nullopt for a code
// that is not an active ISO 4217 currency.
std::optional<int> CurrencyExponent(std::string_view code);

}  // namespace txscore::fraud
