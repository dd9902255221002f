# find_package(gmem) -> the imported target gmem::client (libgmem_client.so and the headers
# include/gmem/gmem.h, gmem/chunking.hpp). Relocatable: every path is relative to this file,
# which lives in PREFIX/lib/cmake/gmem/.
get_filename_component(_gmem_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET gmem::client)
  add_library(gmem::client SHARED IMPORTED)
  set_target_properties(gmem::client PROPERTIES
    IMPORTED_LOCATION "${_gmem_prefix}/lib/libgmem_client.so"
    IMPORTED_SONAME "libgmem_client.so"
    INTERFACE_INCLUDE_DIRECTORIES "${_gmem_prefix}/include"
    INTERFACE_LINK_LIBRARIES "${CMAKE_DL_LIBS}")
endif()
set(gmem_INCLUDE_DIR "${_gmem_prefix}/include")
set(gmem_LIBRARY "${_gmem_prefix}/lib/libgmem_client.so")
# The tool and the shim, for projects that run their tests under `gmem run`.
set(gmem_EXECUTABLE "${_gmem_prefix}/bin/gmem")
set(gmem_SHIM "${_gmem_prefix}/lib/libgmem.so")
unset(_gmem_prefix)
set(gmem_FOUND TRUE)
