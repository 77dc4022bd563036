// Where something was written in a pipeline file.
#pragma once

namespace txscore::pipelines {

// 1-based; line 0 when unknown.
struct SourceLocation {
  int line = 0;
  int column = 0;
};

}  // namespace txscore::pipelines
