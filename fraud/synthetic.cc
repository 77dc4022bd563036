#include "fraud/synthetic.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "fraud/card_token.h"

namespace txscore::fraud {
namespace {

// xoshiro256** seeded through SplitMix64: fully specified, so the stream is the same with
// every standard library (std::normal_distribution and friends are not).
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& s : state_) {
      seed += 0x9e3779b97f4a7c15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      s = z ^ (z >> 31);
    }
  }
  uint64_t Next() {
    const uint64_t result = Rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = Rotl(state_[3], 45);
    return result;
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  int Int(int lo, int hi) { return lo + static_cast<int>(Next() % static_cast<uint64_t>(hi - lo + 1)); }  // [lo, hi]
  bool Chance(double p) { return Uniform() < p; }
  double Normal() {  // Box-Muller
    const double u1 = 1.0 - Uniform();
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }
  double Exponential(double mean) { return -mean * std::log(1.0 - Uniform()); }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t state_[4];
};

struct Country {
  std::string_view code;
  std::string_view currency;
  int currency_exponent;
  double latitude;
  double longitude;
  int utc_offset_hours;
};

constexpr Country kCountries[] = {
    {"US", "USD", 2, 40.71, -74.01, -5},  {"GB", "GBP", 2, 51.51, -0.13, 0},    {"DE", "EUR", 2, 52.52, 13.40, 1},
    {"FR", "EUR", 2, 48.86, 2.35, 1},     {"CA", "CAD", 2, 43.65, -79.38, -5},  {"JP", "JPY", 0, 35.68, 139.69, 9},
    {"BR", "BRL", 2, -23.55, -46.63, -3}, {"AU", "AUD", 2, -33.87, 151.21, 10}, {"IN", "INR", 2, 19.08, 72.88, 5},
    {"MX", "MXN", 2, 19.43, -99.13, -6},
};
constexpr int kCountryCount = sizeof(kCountries) / sizeof(kCountries[0]);

// Everyday merchant categories with their share and typical amount relative to the card's.
struct EverydayMcc {
  std::string_view mcc;
  double amount_factor;
};
constexpr EverydayMcc kEverydayMccs[] = {
    {"5411", 1.0}, {"5812", 0.8}, {"5541", 1.2}, {"5311", 1.5}, {"5912", 0.6},
    {"4111", 0.2}, {"5814", 0.3}, {"5651", 1.8}, {"5732", 4.0}, {"5999", 1.0},
};

struct Card {
  int index;
  std::string pan;
  const Country* home;
  double latitude;
  double longitude;
  double typical_amount;  // major units
  double daily_rate;
  std::vector<std::string> devices;
  std::vector<int> merchants;  // indexes into the home country's merchant list
  bool night_gambler;
};

int64_t ToMinor(double major, int exponent) {
  return std::max<int64_t>(1, std::llround(major * std::pow(10.0, exponent)));
}

class Generator {
 public:
  explicit Generator(const SyntheticOptions& options) : options_(options), rng_(options.seed) {}

  std::vector<LabeledTransaction> Run() {
    for (int i = 0; i < options_.cards; ++i) {
      Card card = MakeCard(i);
      Legitimate(card);
      if (rng_.Chance(options_.attacked_card_fraction)) Attack(card);
    }
    std::stable_sort(out_.begin(), out_.end(), [](const LabeledTransaction& a, const LabeledTransaction& b) {
      return a.tx.timestamp_ms < b.tx.timestamp_ms;
    });
    for (size_t n = 0; n < out_.size(); ++n) {
      out_[n].tx.request_id = "syn-" + std::to_string(options_.seed) + "-" + std::to_string(n);
    }
    return std::move(out_);
  }

 private:
  Card MakeCard(int index) {
    Card card;
    card.index = index;
    std::string digits = "400000" + PadNumber(static_cast<uint64_t>(index) * 7919 + options_.seed % 1000, 9);
    card.pan = digits + LuhnCheckDigit(digits);
    card.home = &kCountries[rng_.Int(0, kCountryCount - 1)];
    card.latitude = card.home->latitude + rng_.Uniform(-0.3, 0.3);
    card.longitude = card.home->longitude + rng_.Uniform(-0.3, 0.3);
    card.typical_amount = std::exp(rng_.Uniform(std::log(15.0), std::log(90.0)));
    if (card.home->currency_exponent == 0) card.typical_amount *= 100;  // yen-like scale
    card.daily_rate = rng_.Uniform(1.0, 4.0);
    const int device_count = rng_.Int(1, 2);
    for (int d = 0; d < device_count; ++d) card.devices.push_back(DeviceId(index, d));
    const int merchant_count = rng_.Int(8, 25);
    for (int m = 0; m < merchant_count; ++m) card.merchants.push_back(rng_.Int(0, 399));
    card.night_gambler = rng_.Chance(0.02);
    return card;
  }

  static std::string PadNumber(uint64_t v, int width) {
    std::string s = std::to_string(v % static_cast<uint64_t>(std::pow(10, width)));
    return std::string(width - s.size(), '0') + s;
  }
  static std::string DeviceId(int card, int k) { return "dev-" + std::to_string(card) + "-" + std::to_string(k); }
  static std::string MerchantId(const Country& c, int m) {
    return "m-" + std::string(c.code) + "-" + std::to_string(m);
  }

  // A local daytime moment: hours 7-23 local, skewed to the afternoon.
  int64_t DaytimeMs(const Card& card, int day) {
    const double local_hour = 7.0 + 16.0 * std::sqrt(rng_.Uniform());
    const double utc_hour = local_hour - card.home->utc_offset_hours;
    return options_.start_ms + static_cast<int64_t>((day * 24.0 + utc_hour) * 3600e3);
  }

  RawTransaction Base(const Card& card, int64_t t_ms, const Country& where) {
    RawTransaction tx;
    tx.timestamp_ms = t_ms;
    tx.currency = std::string(card.home->currency);
    tx.card_number = card.pan;
    tx.card_country = std::string(card.home->code);
    tx.merchant_country = std::string(where.code);
    return tx;
  }

  void Emit(RawTransaction tx, FraudPattern pattern) {
    if (tx.timestamp_ms < options_.start_ms) tx.timestamp_ms = options_.start_ms;
    out_.push_back({std::move(tx), pattern != FraudPattern::kNone, pattern});
  }

  double Amount(const Card& card, double factor) {
    return card.typical_amount * factor * std::exp(0.6 * rng_.Normal());
  }

  void CardPresent(RawTransaction* tx, double lat, double lon) {
    tx->channel = static_cast<int>(rng_.Chance(0.5) ? Channel::kContactless : Channel::kCardPresent);
    tx->entry_mode = static_cast<int>(tx->channel == static_cast<int>(Channel::kContactless) ? EntryMode::kContactless
                                                                                             : EntryMode::kChip);
    tx->latitude = lat + rng_.Uniform(-0.05, 0.05);
    tx->longitude = lon + rng_.Uniform(-0.05, 0.05);
  }

  void Online(RawTransaction* tx, const std::string& device) {
    tx->channel = static_cast<int>(Channel::kEcommerce);
    tx->entry_mode = static_cast<int>(rng_.Chance(0.7) ? EntryMode::kCredentialOnFile : EntryMode::kManualKeyed);
    tx->device_id = device;
    tx->ip_address = "10." + std::to_string(rng_.Int(0, 255)) + "." + std::to_string(rng_.Int(0, 255)) + ".7";
  }

  void Legitimate(Card& card) {
    const Country* trip = nullptr;
    int trip_start = -1, trip_end = -1;
    if (rng_.Chance(0.05)) {
      trip = &kCountries[rng_.Int(0, kCountryCount - 1)];
      trip_start = rng_.Int(1, std::max(1, options_.days - 4));
      trip_end = trip_start + rng_.Int(2, 4);
    }
    const int upgrade_day = rng_.Chance(0.05) ? rng_.Int(1, std::max(1, options_.days - 1)) : -1;
    for (int day = 0; day < options_.days; ++day) {
      if (day == upgrade_day) card.devices.push_back(DeviceId(card.index, static_cast<int>(card.devices.size())));
      const bool travelling = trip != nullptr && day >= trip_start && day < trip_end;
      const int count = Poisson(card.daily_rate);
      for (int k = 0; k < count; ++k) {
        const int64_t t = DaytimeMs(card, day);
        const Country& where = travelling ? *trip : *card.home;
        RawTransaction tx = Base(card, t, where);
        const double r = rng_.Uniform();
        if (r < 0.05 && !travelling) {  // ATM withdrawal
          tx.mcc = "6011";
          tx.merchant_id = "atm-" + std::string(where.code) + "-" + std::to_string(rng_.Int(0, 99));
          tx.channel = static_cast<int>(Channel::kAtm);
          tx.entry_mode = static_cast<int>(EntryMode::kChip);
          tx.latitude = card.latitude;
          tx.longitude = card.longitude;
          tx.amount_minor = ToMinor(card.typical_amount * rng_.Int(2, 6), card.home->currency_exponent);
        } else if (r < 0.40 && !travelling) {  // online, from one of the card's devices
          const EverydayMcc& mcc = kEverydayMccs[rng_.Int(0, 9)];
          const bool app_store = rng_.Chance(0.15);
          tx.mcc = app_store ? "5817" : std::string(mcc.mcc);
          tx.merchant_id =
              app_store ? "m-appstore"
                        : MerchantId(where, card.merchants[rng_.Int(0, static_cast<int>(card.merchants.size()) - 1)]);
          Online(&tx, card.devices[rng_.Int(0, static_cast<int>(card.devices.size()) - 1)]);
          tx.amount_minor = ToMinor(app_store ? rng_.Uniform(0.99, 4.99) : Amount(card, mcc.amount_factor),
                                    card.home->currency_exponent);
        } else {  // in store, near home or at the trip's destination
          const EverydayMcc& mcc = kEverydayMccs[rng_.Int(0, 9)];
          tx.mcc = std::string(mcc.mcc);
          const double lat = travelling ? where.latitude : card.latitude;
          const double lon = travelling ? where.longitude : card.longitude;
          tx.merchant_id =
              travelling ? MerchantId(where, rng_.Int(0, 399))
                         : MerchantId(where, card.merchants[rng_.Int(0, static_cast<int>(card.merchants.size()) - 1)]);
          CardPresent(&tx, lat, lon);
          tx.amount_minor = ToMinor(Amount(card, mcc.amount_factor), card.home->currency_exponent);
        }
        Emit(std::move(tx), FraudPattern::kNone);
      }
      if (card.night_gambler && rng_.Chance(0.3)) {
        RawTransaction tx = Base(card, NightMs(card, day), *card.home);
        tx.mcc = "7995";
        tx.merchant_id = "m-casino-" + std::to_string(card.index % 7);
        Online(&tx, card.devices[0]);
        tx.amount_minor = ToMinor(Amount(card, 2.0), card.home->currency_exponent);
        Emit(std::move(tx), FraudPattern::kNone);
      }
    }
  }

  int64_t NightMs(const Card& card, int day) {
    const double local_hour = rng_.Uniform(1.0, 4.0);
    return options_.start_ms + static_cast<int64_t>((day * 24.0 + local_hour - card.home->utc_offset_hours) * 3600e3);
  }

  int Poisson(double mean) {
    int n = 0;
    double t = rng_.Exponential(1.0);
    while (t < mean) {
      ++n;
      t += rng_.Exponential(1.0);
    }
    return n;
  }

  void Attack(const Card& card) {
    const int day = rng_.Int(std::min(3, options_.days - 1), options_.days - 1);
    const int kind = rng_.Int(0, 3);
    const std::string fraud_device = "dev-x-" + std::to_string(rng_.Next() % 1000000);
    if (kind == 0) {  // card testing, often followed by one real purchase
      int64_t t = DaytimeMs(card, day) + rng_.Int(-6, 6) * 3600000LL;
      const int burst = rng_.Int(5, 15);
      for (int i = 0; i < burst; ++i) {
        t += static_cast<int64_t>(rng_.Uniform(3, 25) * 1000);
        RawTransaction tx = Base(card, t, *card.home);
        tx.mcc = rng_.Chance(0.5) ? "5816" : "5999";
        tx.merchant_id = "m-web-" + std::to_string(rng_.Int(0, 5000));
        Online(&tx, fraud_device);
        tx.amount_minor = ToMinor(rng_.Uniform(0.5, 3.0) * (card.home->currency_exponent == 0 ? 100 : 1),
                                  card.home->currency_exponent);
        Emit(std::move(tx), FraudPattern::kCardTesting);
      }
      if (rng_.Chance(0.6)) {
        RawTransaction tx = Base(card, t + rng_.Int(60, 1800) * 1000LL, *card.home);
        tx.mcc = "5732";
        tx.merchant_id = "m-web-" + std::to_string(rng_.Int(0, 5000));
        Online(&tx, fraud_device);
        tx.amount_minor = ToMinor(Amount(card, 8.0), card.home->currency_exponent);
        Emit(std::move(tx), FraudPattern::kCardTesting);
      }
    } else if (kind == 1) {  // account takeover
      int64_t t = DaytimeMs(card, day);
      const int purchases = rng_.Int(2, 4);
      for (int i = 0; i < purchases; ++i) {
        t += rng_.Int(5, 60) * 60000LL;
        const Country& where = rng_.Chance(0.4) ? kCountries[rng_.Int(0, kCountryCount - 1)] : *card.home;
        RawTransaction tx = Base(card, t, where);
        static constexpr std::string_view kMccs[] = {"5732", "5944", "4829", "5045"};
        tx.mcc = std::string(kMccs[rng_.Int(0, 3)]);
        tx.merchant_id = MerchantId(where, rng_.Int(400, 499));
        Online(&tx, fraud_device);
        tx.amount_minor = ToMinor(Amount(card, rng_.Uniform(6, 20)), card.home->currency_exponent);
        Emit(std::move(tx), FraudPattern::kAccountTakeover);
      }
    } else if (kind == 2) {  // impossible travel: a skimmed card used far away
      int64_t t = DaytimeMs(card, day);
      RawTransaction home = Base(card, t, *card.home);
      home.mcc = "5411";
      home.merchant_id = MerchantId(*card.home, card.merchants[0]);
      CardPresent(&home, card.latitude, card.longitude);
      home.amount_minor = ToMinor(Amount(card, 1.0), card.home->currency_exponent);
      Emit(std::move(home), FraudPattern::kNone);
      const Country* far = card.home;
      while (far == card.home) far = &kCountries[rng_.Int(0, kCountryCount - 1)];
      const int uses = rng_.Int(1, 3);
      for (int i = 0; i < uses; ++i) {
        t += rng_.Int(10, 90) * 60000LL;
        RawTransaction tx = Base(card, t, *far);
        tx.mcc = rng_.Chance(0.5) ? "5944" : "5311";
        tx.merchant_id = MerchantId(*far, rng_.Int(0, 399));
        CardPresent(&tx, far->latitude, far->longitude);
        tx.entry_mode = static_cast<int>(EntryMode::kMagstripe);
        tx.amount_minor = ToMinor(Amount(card, rng_.Uniform(3, 10)), card.home->currency_exponent);
        Emit(std::move(tx), FraudPattern::kImpossibleTravel);
      }
    } else {  // high-risk MCC at night
      const int uses = rng_.Int(1, 3);
      int64_t t = NightMs(card, day);
      for (int i = 0; i < uses; ++i) {
        t += rng_.Int(2, 20) * 60000LL;
        RawTransaction tx = Base(card, t, *card.home);
        tx.mcc = rng_.Chance(0.5) ? "7995" : "6051";
        tx.merchant_id = "m-risk-" + std::to_string(rng_.Int(0, 50));
        Online(&tx, rng_.Chance(0.7) ? fraud_device : card.devices[0]);
        tx.amount_minor = ToMinor(Amount(card, rng_.Uniform(3, 15)), card.home->currency_exponent);
        Emit(std::move(tx), FraudPattern::kHighRiskNight);
      }
    }
  }

  SyntheticOptions options_;
  Rng rng_;
  std::vector<LabeledTransaction> out_;
};

}  // namespace

const char* FraudPatternName(FraudPattern pattern) {
  switch (pattern) {
    case FraudPattern::kNone:
      return "none";
    case FraudPattern::kCardTesting:
      return "card_testing";
    case FraudPattern::kAccountTakeover:
      return "account_takeover";
    case FraudPattern::kImpossibleTravel:
      return "impossible_travel";
    case FraudPattern::kHighRiskNight:
      return "high_risk_night";
  }
  return "unknown";
}

std::vector<LabeledTransaction> GenerateTransactions(const SyntheticOptions& options) {
  return Generator(options).Run();
}

}  // namespace txscore::fraud
