# Run at every build (the txscore_build_commit target): writes OUT, a header defining
# TXSCORE_COMMIT as the source tree's commit (12 hex digits, -dirty with changes not committed), or "unknown"
# outside a git checkout. The file is rewritten only when the commit changed, so a build at
# the same commit recompiles nothing.
execute_process(COMMAND git -C "${SOURCE_DIR}" describe --always --dirty --abbrev=12 --exclude=*
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE failed)
if(failed OR NOT commit)
  set(commit "unknown")
endif()
set(content "// Written by cmake/build_commit.cmake at build time; never committed.\n#define TXSCORE_COMMIT \"${commit}\"\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" previous)
endif()
if(NOT "${previous}" STREQUAL "${content}")
  file(WRITE "${OUT}" "${content}")
endif()
