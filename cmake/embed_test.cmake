# EmbedTest (tests/CMakeLists.txt): delayd_embed reads a file whole, and
# refuses one that holds its literal's closing sequence. Run with -P; the
# test passes on the refusal's message, printed after the read checked out.
include(${CMAKE_CURRENT_LIST_DIR}/embed.cmake)
set(dir ${CMAKE_CURRENT_BINARY_DIR}/embed_test)
file(MAKE_DIRECTORY ${dir})
file(WRITE ${dir}/ok.txt "a;b [x] \"q\" )delayd_assetX\n")
delayd_embed(OK ${dir}/ok.txt delayd_asset)
if(NOT OK STREQUAL "a;b [x] \"q\" )delayd_assetX\n")
  message(FATAL_ERROR "read back differently: [${OK}]")
endif()
message(STATUS "read back whole")
file(WRITE ${dir}/bad.txt "before )delayd_asset\" after")
delayd_embed(BAD ${dir}/bad.txt delayd_asset)
message(FATAL_ERROR "a file holding the closing sequence was embedded")
