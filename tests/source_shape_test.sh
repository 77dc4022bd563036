#!/bin/sh
# Two rules of the source tree's shape (docs/ARCHITECTURE.md), checked so that CI fails when
# one is broken rather than when a reviewer notices:
#  1. No file under service/ includes a stage kind's header (pipelines/stages/): a stage
#     publishes what it serves through PreparedStage::Serves (pipelines/stage_kind.h).
#  2. No production source file is longer than 1,500 lines: split it by concern instead.
# Run from the repository root.
status=0
included=$(grep -rnE '#[[:space:]]*include[[:space:]]*["<]pipelines/stages/' service --include=*.cc --include=*.h)
if [ -n "$included" ]; then
  echo "source shape: service/ includes a stage kind's header (publish through PreparedStage::Serves instead):"
  echo "$included"
  status=1
fi
long=$(find accelerator common fraud llm pipelines service storage \( -name '*.cc' -o -name '*.h' \) -exec wc -l {} + |
  awk '$2 != "total" && $1 > 1500 {print "  " $2 ": " $1 " lines"}')
if [ -n "$long" ]; then
  echo "source shape: files over 1,500 lines (split them by concern):"
  echo "$long"
  status=1
fi
[ $status -eq 0 ] && echo "source shape: no stage kind's header in service/, no file over 1,500 lines"
exit $status
