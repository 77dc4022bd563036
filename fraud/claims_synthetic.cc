#include "fraud/claims_synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace txscore::fraud {
namespace {

// SplitMix64: small, fast, and the same sequence on every platform (std::*_distribution is not).
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  int64_t Between(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(Next() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool Chance(double p) { return Uniform() < p; }
  double Exponential(double mean) { return -mean * std::log(1.0 - Uniform()); }
  int Poisson(double mean) {  // Knuth; small means only
    const double limit = std::exp(-mean);
    double product = Uniform();
    int k = 0;
    while (product > limit) {
      ++k;
      product *= Uniform();
    }
    return k;
  }
  template <typename T>
  const T& Pick(const std::vector<T>& items) {
    return items[static_cast<size_t>(Next() % items.size())];
  }

 private:
  uint64_t state_;
};

struct TypeProfile {
  std::string type;
  std::vector<double> limits;
  std::vector<std::string> specific;  // {date}, {provider} and {place} are filled in
  std::vector<std::string> vague;
};

const std::vector<TypeProfile>& Profiles() {
  static const std::vector<TypeProfile> profiles = {
      {"auto_collision",
       {10000, 25000, 50000},
       {"On {date} at about 6 pm another car ran a red light at {place} and hit the front left side of my car. The "
        "police took a report and the other driver gave me her insurance details. Repair estimate from {provider}.",
        "On {date} I was rear-ended while stopped in traffic on {place}. Rear bumper, trunk lid and one tail light are "
        "damaged; photos and the estimate from {provider} are attached."},
       {"There was an accident with the car and now it is damaged. It was in the evening I think.",
        "The car got hit somewhere in town. Damage to the car. Need it fixed."}},
      {"auto_theft",
       {10000, 25000, 50000},
       {"My car was stolen from the parking garage at {place} overnight before {date}. I reported it to the police the "
        "same morning (report number attached); both keys are in my possession.",
        "On {date} my car was taken from outside my home on {place}. A neighbour's camera shows two people at 3 am. "
        "Police report attached."},
       {"The car is gone. Someone took it. I do not know when exactly.",
        "Car was stolen, not sure where it was parked at the time."}},
      {"property_water",
       {25000, 50000, 100000},
       {"On {date} a pipe under the kitchen sink burst while we were at work; water spread into the hallway and the "
        "flat below. The plumber from {provider} replaced the pipe the same evening; invoice attached.",
        "Heavy rain on {date} came through the roof above the bedroom at {place}. Ceiling plaster and carpet damaged; "
        "{provider} inspected and quoted the repair."},
       {"Water damage in the house. Some things are ruined.", "There was a leak and a lot of damage everywhere."}},
      {"property_fire",
       {50000, 100000},
       {"On {date} a pan fire in the kitchen at {place} damaged the cabinets, extractor hood and ceiling. The fire "
        "brigade report is attached; {provider} quoted the kitchen repair.",
        "A faulty heater started a fire in the garage on {date}; the fire brigade attended. Tools and a bicycle were "
        "destroyed; list with receipts attached."},
       {"There was a fire and many things burned.", "Fire damage, everything in the room is lost."}},
      {"burglary",
       {5000, 10000, 25000},
       {"Our flat at {place} was broken into on {date} while we were away for the weekend; the door lock was forced. "
        "A laptop, a camera and jewellery were taken. Police report and receipts attached.",
        "On {date} someone broke a window at {place} and took two bicycles from the hallway. Police report attached."},
       {"Things were stolen from the house. Expensive items.",
        "Someone came in and took stuff, a lot of valuable things."}},
      {"health",
       {5000, 10000, 25000},
       {"On {date} I fell on the stairs at {place} and broke my wrist; treated at {provider}, cast and two follow-up "
        "visits. Invoices attached.",
        "Emergency treatment at {provider} on {date} for a severe allergic reaction; discharge letter attached."},
       {"I had treatment for an injury. The bills are high.", "Medical costs after an accident, various treatments."}},
      {"travel",
       {5000, 10000},
       {"My flight home on {date} was cancelled and I had to stay two extra nights at {place}; hotel and meal receipts "
        "attached.",
        "My suitcase was lost on the flight of {date}; the airline's property irregularity report and the receipts "
        "for replacement clothes are attached."},
       {"Problems on the trip, extra costs.", "Luggage was lost and there were expenses."}},
  };
  return profiles;
}

const std::vector<std::string> kPlaces = {"Elm Street",   "the Riverside car park", "Station Road", "Maple Avenue",
                                          "Harbour View", "the North Mall",         "Kings Road",   "Oak Lane"};
const std::vector<std::string> kPressure = {
    " I need the money urgently, please settle this week.",
    " Please pay in cash as soon as possible, I cannot wait for an inspection.",
    " If this is not settled quickly my lawyer will be in touch.",
};
const std::vector<std::string> kLegitNotes = {"Photos consistent with the description.",
                                              "Estimate within normal range.", "Police report number verified.", ""};
const std::vector<std::string> kSuspiciousNotes = {"Claimant could not provide receipts.",
                                                   "Claimant reluctant to allow an inspection.",
                                                   "Damage appears older than the stated date.", ""};

std::string Fill(std::string text, const std::string& date, const std::string& provider, const std::string& place) {
  for (auto [key, value] :
       {std::pair<std::string, const std::string*>{"{date}", &date}, {"{provider}", &provider}, {"{place}", &place}}) {
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value->size())) {
      text.replace(at, key.size(), *value);
    }
  }
  return text;
}

std::string Id(const char* prefix, int64_t n, int width) {
  char text[32];
  std::snprintf(text, sizeof text, "%s-%0*lld", prefix, width, static_cast<long long>(n));
  return text;
}

}  // namespace

std::string IsoDate(int64_t day) {
  // Civil from days (Howard Hinnant's algorithm), proleptic Gregorian.
  day += 719468;
  const int64_t era = (day >= 0 ? day : day - 146096) / 146097;
  const int64_t doe = day - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int64_t d = doy - (153 * mp + 2) / 5 + 1;
  const int64_t m = mp < 10 ? mp + 3 : mp - 9;
  const int64_t y = yoe + era * 400 + (m <= 2);
  char text[72];  // room for any int64, as the compiler checks
  std::snprintf(text, sizeof text, "%04lld-%02lld-%02lld", static_cast<long long>(y), static_cast<long long>(m),
                static_cast<long long>(d));
  return text;
}

std::vector<LabeledClaim> GenerateClaims(const SyntheticClaimsOptions& options) {
  Random random(options.seed * 0x2545f4914f6cdd1dULL + 17);
  const int mills = std::max(1, std::min(6, options.providers / 10));
  std::vector<LabeledClaim> claims;
  claims.reserve(static_cast<size_t>(std::max(0, options.claims)));
  const int claimants = std::max(1, options.claims * 3 / 4);  // some claimants claim more than once
  const int days =
      options.days > 0
          ? options.days
          : std::max(1, static_cast<int>(static_cast<int64_t>(options.claims) * 365 / kSyntheticClaimsPerYear));
  std::vector<int64_t> report_days;
  for (int n = 0; n < options.claims; ++n) {
    LabeledClaim labeled;
    RawClaim& c = labeled.claim;
    const TypeProfile& profile = random.Pick(Profiles());
    const bool fraud = random.Chance(options.fraud_rate);
    labeled.is_fraud = fraud;
    c.claim_id = Id(("CLM-" + std::to_string(options.seed)).c_str(), n, 6);
    c.policy_id = Id("POL", random.Between(1, 900000), 6);
    c.claimant_id = Id("C", random.Between(1, claimants), 6);
    c.claim_type = profile.type;
    c.policy_limit = random.Pick(profile.limits);
    const int64_t incident = options.start_day + random.Between(0, days - 1);
    int64_t delay = static_cast<int64_t>(random.Exponential(2.5));
    if (profile.type == "travel" && random.Chance(0.4)) delay += random.Between(10, 40);  // reported on return
    double share = std::min(0.95, 0.05 + random.Exponential(0.18));
    if ((profile.type == "auto_theft" || profile.type == "property_fire") && random.Chance(0.25))
      share = 1.0;  // total loss
    int64_t prior = random.Poisson(0.6);
    if (random.Chance(0.05)) prior += random.Between(3, 6);  // honest but unlucky
    int64_t provider = random.Between(mills + 1, options.providers);

    std::vector<std::string> structured;
    bool vague = false, inconsistent = false, pressure = false;
    if (fraud) {
      static const std::vector<std::string> kStructured = {"late_report", "just_under_limit", "mill_provider",
                                                           "many_prior_claims"};
      static const std::vector<std::string> kNarrative = {"inconsistent_dates", "vague_description",
                                                          "pressure_to_settle"};
      const int count = static_cast<int>(random.Between(1, 3));
      for (int k = 0; k < count; ++k) {
        const std::string& p = random.Chance(0.6) ? random.Pick(kStructured) : random.Pick(kNarrative);
        if (std::find(labeled.patterns.begin(), labeled.patterns.end(), p) == labeled.patterns.end()) {
          labeled.patterns.push_back(p);
        }
      }
      for (const std::string& p : labeled.patterns) {
        if (p == "late_report") delay = random.Between(30, 120);
        if (p == "just_under_limit") share = 0.90 + 0.09 * random.Uniform();
        if (p == "mill_provider") provider = random.Between(1, mills);
        if (p == "many_prior_claims") prior = random.Between(4, 12);
        vague = vague || p == "vague_description";
        inconsistent = inconsistent || p == "inconsistent_dates";
        pressure = pressure || p == "pressure_to_settle";
      }
    }
    c.incident_date = IsoDate(incident);
    c.report_date = IsoDate(incident + delay);
    c.amount_claimed = std::round(c.policy_limit * share * 100.0) / 100.0;
    c.prior_claims = prior;
    c.provider_id = Id("P", provider, 4);
    const std::string place = random.Pick(kPlaces);
    const std::string told_date = inconsistent ? IsoDate(incident + random.Between(4, 20)) : c.incident_date;
    if (vague) {
      c.narrative = random.Pick(profile.vague);
      if (inconsistent) c.narrative += " It was on " + told_date + ".";
    } else {
      c.narrative = Fill(random.Pick(profile.specific), told_date, c.provider_id, place);
      if (!fraud && random.Chance(0.1)) c.narrative = random.Pick(profile.vague);  // brief but honest
    }
    if (pressure) c.narrative += random.Pick(kPressure);
    c.adjuster_notes = fraud && random.Chance(0.5) ? random.Pick(kSuspiciousNotes) : random.Pick(kLegitNotes);
    claims.push_back(std::move(labeled));
    report_days.push_back(incident + delay);
  }
  std::vector<size_t> order(claims.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return report_days[a] < report_days[b]; });
  std::vector<LabeledClaim> sorted;
  sorted.reserve(claims.size());
  for (size_t i : order) sorted.push_back(std::move(claims[i]));
  return sorted;
}

}  // namespace txscore::fraud
