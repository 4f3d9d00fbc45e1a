# delayd_embed(VAR FILE DELIM): VAR gets FILE's text, to be compiled in as
# the raw string literal R"DELIM(...)DELIM" (configure_file with @ONLY).
# Read when CMake configures, and again whenever FILE changes. A file that
# holds the literal's closing sequence would end it early (at best a compile
# error, at worst a truncated file served), so it is refused.
function(delayd_embed var file delim)
  if(NOT CMAKE_SCRIPT_MODE_FILE)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${file})
  endif()
  file(READ ${file} text)
  string(FIND "${text}" ")${delim}\"" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "${file} holds )${delim}\", which would end its embedded literal")
  endif()
  set(${var} "${text}" PARENT_SCOPE)
endfunction()
