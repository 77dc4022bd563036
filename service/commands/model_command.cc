// txscore model predict --model FILE: CSV feature rows on stdin, one probability per line.
//
// With a header line, columns are matched to the model's schema by name (extra columns such
// as "label" are ignored); without one, each row must hold exactly the schema's features in
// schema order. Empty cells and "nan" are missing values.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <sstream>

#include "fraud/xgboost_model.h"
#include "service/commands/commands.h"

namespace txscore::service {
namespace {

struct PredictOptions {
  std::string model_path;
  std::string schema_path;
};

std::vector<std::string> SplitCsv(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream in(line);
  std::string cell;
  while (std::getline(in, cell, ',')) cells.push_back(cell);
  if (!line.empty() && line.back() == ',') cells.emplace_back();
  return cells;
}

bool ParseCell(const std::string& cell, float* out) {
  if (cell.empty() || cell == "nan" || cell == "NaN") {
    *out = std::numeric_limits<float>::quiet_NaN();
    return true;
  }
  char* end = nullptr;
  *out = std::strtof(cell.c_str(), &end);
  return end != cell.c_str() && *end == '\0';
}

int RunPredict(const PredictOptions& options) {
  fraud::XGBoostModelOptions model_options;
  model_options.schema_path = options.schema_path;
  Result<std::unique_ptr<fraud::XGBoostModel>> model = fraud::XGBoostModel::Load(options.model_path, model_options);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.error().ToString().c_str());
    return 1;
  }
  const fraud::FeatureSchema& schema = (*model)->schema();
  // column_of[i]: CSV column holding schema feature i.
  std::vector<size_t> column_of(schema.size());
  for (size_t i = 0; i < schema.size(); ++i) column_of[i] = i;
  std::string line;
  size_t line_number = 0;
  std::vector<float> row(schema.size());
  while (std::getline(std::cin, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::vector<std::string> cells = SplitCsv(line);
    if (line_number == 1) {
      float ignored;
      if (!ParseCell(cells[0], &ignored)) {  // a header
        for (size_t i = 0; i < schema.size(); ++i) {
          const std::string name(fraud::FeatureName(schema.at(i)));
          auto it = std::find(cells.begin(), cells.end(), name);
          if (it == cells.end()) {
            std::fprintf(stderr, "line 1: the header has no column \"%s\", which the model needs\n", name.c_str());
            return 1;
          }
          column_of[i] = static_cast<size_t>(it - cells.begin());
        }
        continue;
      }
      if (cells.size() != schema.size()) {
        std::fprintf(stderr, "line 1: %zu values, but the model takes %zu features; add a header to select columns\n",
                     cells.size(), schema.size());
        return 1;
      }
    }
    for (size_t i = 0; i < schema.size(); ++i) {
      if (column_of[i] >= cells.size() || !ParseCell(cells[column_of[i]], &row[i])) {
        std::fprintf(stderr, "line %zu: column %zu is not a number\n", line_number, column_of[i] + 1);
        return 1;
      }
    }
    Result<std::vector<float>> prediction = (*model)->Predict(row.data(), 1);
    if (!prediction.ok()) {
      std::fprintf(stderr, "line %zu: %s\n", line_number, prediction.error().ToString().c_str());
      return 1;
    }
    std::printf("%.9g\n", (*prediction)[0]);
  }
  return 0;
}

}  // namespace

void AddModelCommand(CLI::App& app, int* exit_code) {
  CLI::App* model = app.add_subcommand("model", "Inspect and check models");
  model->require_subcommand(1);
  auto options = std::make_shared<PredictOptions>();
  CLI::App* predict =
      model->add_subcommand("predict", "Read CSV feature rows on stdin, print one probability per line");
  predict->add_option("--model", options->model_path, "XGBoost model (.json or .ubj)")->required();
  predict->add_option("--schema", options->schema_path, "Feature schema (default: beside the model)");
  predict->callback([options, exit_code] { *exit_code = RunPredict(*options); });
}

}  // namespace txscore::service
