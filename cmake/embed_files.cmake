# Run at build time (the dashboard assets' custom command): writes OUT, a C++ source that
# defines txscore::service::DashboardAssets() (service/dashboard.h) holding each file LIST
# names as bytes. LIST is a text file of "URL_PATH|TYPE|FILE" lines, TYPE one of html, js,
# css, txt. The output is a build
# product, never committed.
set(content "// Written by cmake/embed_files.cmake at build time; never committed.\n")
string(APPEND content "#include \"service/dashboard.h\"\n\nnamespace txscore::service {\nnamespace {\n")
file(STRINGS "${LIST}" entries)
set(table "")
set(index 0)
foreach(entry IN LISTS entries)
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 0 url_path)
  list(GET parts 1 type)
  set(content_types_html "text/html")
  set(content_types_js "text/javascript")
  set(content_types_css "text/css")
  set(content_types_txt "text/plain")
  if(NOT DEFINED content_types_${type})
    message(FATAL_ERROR "${LIST}: unknown type ${type}")
  endif()
  set(content_type "${content_types_${type}}; charset=utf-8")
  list(GET parts 2 file)
  if(NOT EXISTS "${file}")
    message(FATAL_ERROR "${file} is missing: scripts/setup.sh installs the dashboard's npm packages")
  endif()
  file(READ "${file}" hex HEX)
  string(LENGTH "${hex}" hex_length)
  math(EXPR size "${hex_length} / 2")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(APPEND content "const unsigned char kAsset${index}[${size}] = {${bytes}};\n")
  string(APPEND table "      {\"${url_path}\", \"${content_type}\", "
                      "std::string_view(reinterpret_cast<const char*>(kAsset${index}), ${size})},\n")
  math(EXPR index "${index} + 1")
endforeach()
string(APPEND content "}  // namespace\n\nconst std::vector<DashboardAsset>& DashboardAssets() {\n"
                      "  static const std::vector<DashboardAsset> assets = {\n${table}  };\n  return assets;\n}\n\n"
                      "}  // namespace txscore::service\n")
file(WRITE "${OUT}" "${content}")
