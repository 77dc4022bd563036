// ISO 3166-1 alpha-2 country codes.
#pragma once

#include <string_view>

namespace txscore::fraud {

// True for the 249 officially assigned ISO 3166-1 alpha-2 codes ("US", "DE", ...); false for
// user-assigned or unassigned ones ("QQ", "XX", "AB") and anything else.
bool IsIsoCountry(std::string_view code);

}  // namespace txscore::fraud
