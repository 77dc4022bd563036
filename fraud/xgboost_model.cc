#include "fraud/xgboost_model.h"

#include <unistd.h>
#include <xgboost/c_api.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/durable_file.h"
#include "common/file_io.h"
#include "common/prepare_counters.h"
#include "common/sha256.h"
#include "fraud/ubjson_check.h"
#include "fraud/xgboost_tree_check.h"

namespace txscore::fraud {
namespace {

// "<f4" on little-endian hosts, ">f4" on big-endian ones (IBM Z): the array-interface
// description of a host float buffer.
const char* HostFloatTypestr() {
  const uint16_t probe = 1;
  unsigned char first;
  std::memcpy(&first, &probe, 1);
  return first == 1 ? "<f4" : ">f4";
}

std::string PredictConfig(int type) {
  // cache_id is required by XGBoost 1.7's in-place prediction ("Invalid cast, from Null to
  // Integer" without it).
  return "{\"type\": " + std::to_string(type) +
         ", \"training\": false, \"iteration_begin\": 0, \"iteration_end\": 0, \"strict_shape\": false, "
         "\"cache_id\": 0, \"missing\": NaN}";
}

}  // namespace

std::string LastXGBoostError() { return XGBGetLastError(); }

namespace {

// Loads `bytes`, the model as read and checked, into `booster` through a private temporary
// file named with `extension`: XGBoost picks the format from a file's extension (from a
// buffer it would guess it from the first byte, which is '{' for both), and loading the
// model's own path again would load whatever that path holds by then, unchecked.
Status LoadCheckedBytes(BoosterHandle booster, const std::string& bytes, const std::string& extension) {
  std::string path = (std::filesystem::temp_directory_path() / ("txscore-model-XXXXXX" + extension)).string();
  const int fd = ::mkstemps(path.data(), static_cast<int>(extension.size()));  // mode 0600
  if (fd < 0) {
    return Internal("cannot create a temporary copy of the model in " +
                    std::filesystem::temp_directory_path().string() +
                    " (set TMPDIR to choose another directory): " + std::strerror(errno));
  }
  Status status = WriteAll(fd, bytes, path);
  ::close(fd);
  if (status.ok() && XGBoosterLoadModel(booster, path.c_str()) != 0) status = Internal(LastXGBoostError());
  ::unlink(path.c_str());
  return status;
}

}  // namespace

Result<std::unique_ptr<XGBoostModel>> XGBoostModel::Load(const std::string& model_path,
                                                         const XGBoostModelOptions& options) {
  // A model rewritten in place while it is read is refused, not loaded as a mix of two models.
  Result<std::string> read =
      ReadUnchangedFileBounded(model_path, options.max_file_bytes, "model file", options.after_read);
  if (!read.ok()) return read.error();
  const std::string bytes = std::move(read).value();
  if (bytes.empty()) return DataLoss("model file " + model_path + " is empty");

  const std::string schema_path = options.schema_path.empty() ? SchemaPathForModel(model_path) : options.schema_path;
  Result<FeatureSchema> schema = FeatureSchema::Load(schema_path);
  if (!schema.ok()) return schema.error();

  std::unique_ptr<XGBoostModel> model(new XGBoostModel());
  model->schema_ = std::move(schema).value();
  model->model_id_ = std::filesystem::path(model_path).stem().string();
  Result<std::string> digest = Sha256Hex(bytes);
  if (!digest.ok()) return digest.error();
  model->model_version_ = digest->substr(0, 12);
  model->predict_config_ = PredictConfig(0);
  model->contributions_config_ = PredictConfig(3);

  const bool ubjson = model_path.ends_with(".ubj");
  if (ubjson) {
    // XGBoost's UBJSON reader trusts lengths and crashes on a truncated file; check the shape first.
    Status shape = CheckUbjsonDocument(bytes);
    if (!shape.ok()) {
      return DataLoss("model file " + model_path + " is not a valid XGBoost model: " + shape.error().message);
    }
  }
  {
    // XGBoost also trusts the trees' arrays (a cycle in the child links overflows its stack, an
    // index out of range is read while predicting): walk every tree before it sees them.
    const nlohmann::json doc = ubjson ? nlohmann::json::from_ubjson(bytes, /*strict=*/true, /*allow_exceptions=*/false)
                                      : nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) {
      return DataLoss("model file " + model_path + " is not a valid XGBoost model: it does not decode as " +
                      (ubjson ? "UBJSON" : "JSON"));
    }
    Status trees = CheckXGBoostTrees(doc, "model file " + model_path);
    if (!trees.ok()) return DataLoss(trees.error().message + " (not a valid XGBoost model)");
  }

  if (options.after_check) options.after_check();

  BoosterHandle booster = nullptr;
  if (XGBoosterCreate(nullptr, 0, &booster) != 0) return Internal("XGBoosterCreate: " + LastXGBoostError());
  model->booster_ = booster;
  if (Status loaded = LoadCheckedBytes(booster, bytes, ubjson ? ".ubj" : ".json"); !loaded.ok()) {
    return DataLoss("model file " + model_path + " is not a valid XGBoost model: " + loaded.error().message);
  }
  const std::string nthread = std::to_string(options.nthread);
  if (XGBoosterSetParam(booster, "nthread", nthread.c_str()) != 0) {
    return Internal("XGBoosterSetParam(nthread): " + LastXGBoostError());
  }
  bst_ulong num_features = 0;
  if (XGBoosterGetNumFeature(booster, &num_features) != 0) {
    return DataLoss("model file " + model_path + ": cannot read its feature count: " + LastXGBoostError());
  }
  if (num_features != model->schema_.size()) {
    return FailedPrecondition("model " + model_path + " expects " + std::to_string(num_features) +
                              " features but its schema " + schema_path + " lists " +
                              std::to_string(model->schema_.size()));
  }
  // Warm-up: the first prediction configures the learner, which is not thread-safe.
  std::vector<float> row(model->schema_.size(), std::numeric_limits<float>::quiet_NaN());
  Result<std::vector<float>> warm = model->PredictWithXGBoost(row.data(), 1);
  if (!warm.ok()) return warm.error();
  Result<std::vector<float>> warm_contributions = model->ContributionsWithXGBoost(row.data());
  if (!warm_contributions.ok()) return warm_contributions.error();

  if (options.fast_evaluator) {
    // XGBoost exports whatever it loaded (JSON or UBJSON) as JSON; the evaluator reads that.
    bst_ulong length = 0;
    const char* json = nullptr;
    if (XGBoosterSaveModelToBuffer(booster, "{\"format\": \"json\"}", &length, &json) != 0) {
      // XGBoost loaded it but cannot write it back: its content is inconsistent.
      return DataLoss("model file " + model_path + " is not a valid XGBoost model: " + LastXGBoostError());
    }
    Result<TreeEnsemble> ensemble = TreeEnsemble::FromXGBoostJson(std::string_view(json, length));
    if (ensemble.ok()) {
      model->ensemble_ = std::make_unique<TreeEnsemble>(std::move(ensemble).value());
    } else if (ensemble.error().code != ErrorCode::kFailedPrecondition) {
      return ensemble.error();  // a model XGBoost accepted but we read differently: a bug to surface
    }                           // else: a model feature the evaluator lacks; the C API scores it
  }
  CountModelBuild();
  return model;
}

XGBoostModel::~XGBoostModel() {
  if (booster_ != nullptr) XGBoosterFree(static_cast<BoosterHandle>(booster_));
}

Result<std::vector<float>> XGBoostModel::Predict(const float* rows, size_t row_count) const {
  if (!ensemble_) return PredictWithXGBoost(rows, row_count);
  std::vector<float> out(row_count);
  for (size_t r = 0; r < row_count; ++r) out[r] = ensemble_->Probability(rows + r * schema_.size());
  return out;
}

Result<std::vector<float>> XGBoostModel::Contributions(const float* row) const {
  if (!ensemble_) return ContributionsWithXGBoost(row);
  std::vector<float> out(schema_.size() + 1);
  ensemble_->Contributions(row, out.data());
  return out;
}

Result<std::vector<float>> XGBoostModel::PredictWithXGBoost(const float* rows, size_t row_count) const {
  char array_interface[192];
  std::snprintf(array_interface, sizeof array_interface,
                "{\"data\": [%llu, true], \"shape\": [%zu, %zu], \"typestr\": \"%s\", \"version\": 3}",
                static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(rows)), row_count, schema_.size(),
                HostFloatTypestr());
  const bst_ulong* shape = nullptr;
  bst_ulong dims = 0;
  const float* out = nullptr;
  if (XGBoosterPredictFromDense(static_cast<BoosterHandle>(booster_), array_interface, predict_config_.c_str(), nullptr,
                                &shape, &dims, &out) != 0) {
    return Internal("XGBoost prediction failed: " + LastXGBoostError());
  }
  return std::vector<float>(out, out + row_count);
}

Result<std::vector<float>> XGBoostModel::ContributionsWithXGBoost(const float* row) const {
  DMatrixHandle matrix = nullptr;
  if (XGDMatrixCreateFromMat(row, 1, schema_.size(), std::numeric_limits<float>::quiet_NaN(), &matrix) != 0) {
    return Internal("XGDMatrixCreateFromMat: " + LastXGBoostError());
  }
  const bst_ulong* shape = nullptr;
  bst_ulong dims = 0;
  const float* out = nullptr;
  const int rc = XGBoosterPredictFromDMatrix(static_cast<BoosterHandle>(booster_), matrix,
                                             contributions_config_.c_str(), &shape, &dims, &out);
  Result<std::vector<float>> result =
      rc == 0 ? Result<std::vector<float>>(std::vector<float>(out, out + schema_.size() + 1))
              : Result<std::vector<float>>(Internal("XGBoost contributions failed: " + LastXGBoostError()));
  XGDMatrixFree(matrix);
  return result;
}

}  // namespace txscore::fraud
