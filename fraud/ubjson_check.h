#pragma once
// A bounds-checked walk over a UBJSON document (https://ubjson.org, draft 12), run before a
// model file reaches XGBoost.
//
// Why: XGBoost's UBJSON reader trusts the lengths it reads. A truncated .ubj file can make it
// read past the end of its buffer; Debian's xgboost 1.7 segfaults on many prefixes of a valid
// model. A model that is half-copied onto a host must give a clear error, never a crash, so the
// structure is checked here first: every length lies inside the input, containers are closed,
// nesting is bounded, and the document is exactly one value with nothing after it.
//
// This checks shape only; whether the value is a sensible XGBoost model is XGBoost's to decide.

#include <string_view>

#include "common/result.h"

namespace txscore::fraud {

struct UbjsonCheckOptions {
  // Containers nested deeper than this are refused (the walk is recursive). XGBoost models nest
  // about 8 deep.
  int max_depth = 64;
};

// Ok when `bytes` is exactly one well-formed UBJSON value; otherwise a DataLoss error naming what
// was wrong and the byte offset where the walk stopped.
Status CheckUbjsonDocument(std::string_view bytes, const UbjsonCheckOptions& options = {});

}  // namespace txscore::fraud
