# Sourced by the scripts that build (setup.sh, asan.sh, tsan.sh, fuzz.sh), from the checkout's
# root. CMakeLists.txt compiles through ccache when it is installed; with these settings, paths
# under this checkout are hashed relative to it, so another clone of the repository (a CI
# run's) reuses what this one compiled. Debug builds hash the working directory by default;
# that is turned off (the debug info then names the first clone's directory, which only
# matters to a debugger). The cache may grow to 12 GB: the main, sanitizer and fuzz builds
# together take about 8.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-12G}"
