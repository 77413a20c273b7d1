# StofPackage.cmake — dependencies found through pkg-config, and the installed
# package: libstof (shared and static), stof.h, the stof command, stof.pc and
# stofConfig.cmake / stofConfigVersion.cmake with the targets stof::stof and
# stof::stof_static.
#
# Every library the parts link is either a CUDA:: target (the config finds the
# CUDA toolkit again), a PkgConfig:: target made by stof_pkg_dependency (the
# config and stof.pc name its pkg-config module), or a plain system library
# name such as m. Both files are generated from the parts' DEPS, so a part that
# gains a dependency needs no edit here.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
find_package(PkgConfig REQUIRED)

# stof_pkg_dependency(NAME module): PkgConfig::NAME for the pkg-config module,
# remembered for the installed package files.
function(stof_pkg_dependency name module)
  pkg_check_modules(${name} REQUIRED IMPORTED_TARGET GLOBAL ${module})
  set_property(GLOBAL PROPERTY STOF_PKG_MODULE_${name} ${module})
endfunction()

# stof_resolve_aliases(list_var): each ALIAS target in the list replaced by its target.
function(stof_resolve_aliases var)
  set(out)
  foreach(d ${${var}})
    if(TARGET ${d})
      get_target_property(aliased ${d} ALIASED_TARGET)
      if(aliased)
        set(d ${aliased})
      endif()
    endif()
    list(APPEND out ${d})
  endforeach()
  set(${var} ${out} PARENT_SCOPE)
endfunction()

# The pkg-config modules, CUDA components and plain libraries behind deps.
function(stof_classify_deps deps out_modules out_cuda out_plain)
  set(modules)
  set(cuda)
  set(plain)
  foreach(d ${deps})
    if(d MATCHES "^PkgConfig::(.+)$")
      get_property(module GLOBAL PROPERTY STOF_PKG_MODULE_${CMAKE_MATCH_1})
      if(NOT module)
        message(FATAL_ERROR "${d} is linked by libstof but was not made by "
                            "stof_pkg_dependency(${CMAKE_MATCH_1} <module>): the installed "
                            "package could not name it")
      endif()
      list(APPEND modules ${module})
    elseif(d MATCHES "^CUDA::(.+)$")
      list(APPEND cuda ${CMAKE_MATCH_1})
    elseif(TARGET ${d})
      message(FATAL_ERROR "libstof links the build target ${d}, which the installed "
                          "package cannot name; link a PkgConfig:: or CUDA:: target instead")
    else()
      list(APPEND plain ${d})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES modules)
  list(REMOVE_DUPLICATES cuda)
  list(REMOVE_DUPLICATES plain)
  set(${out_modules} ${modules} PARENT_SCOPE)
  set(${out_cuda} ${cuda} PARENT_SCOPE)
  set(${out_plain} ${plain} PARENT_SCOPE)
endfunction()

function(stof_install_package)
  if(SKBUILD)
    stof_install_wheel()
    return()
  endif()
  # The static library's link line: the shared library's and what libstof.a adds.
  get_target_property(deps stof_static LINK_LIBRARIES)
  stof_classify_deps("${deps}" modules cuda plain)
  set(cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/stof)

  set_target_properties(stof_static PROPERTIES EXPORT_NAME stof_static)
  install(TARGETS stof stof_static EXPORT stofTargets
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
          INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  if(TARGET stof_cli)
    install(TARGETS stof_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
  install(FILES ${CMAKE_SOURCE_DIR}/include/stof.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT stofTargets NAMESPACE stof:: DESTINATION ${cmake_dir})

  # stofConfig.cmake: the dependencies, then the targets.
  set(STOF_CONFIG_CUDA_COMPONENTS "${cuda}")
  set(STOF_CONFIG_PKG_MODULES)
  foreach(d ${deps})
    if(d MATCHES "^PkgConfig::(.+)$")
      get_property(module GLOBAL PROPERTY STOF_PKG_MODULE_${CMAKE_MATCH_1})
      list(APPEND STOF_CONFIG_PKG_MODULES "${CMAKE_MATCH_1}=${module}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES STOF_CONFIG_PKG_MODULES)
  configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/stofConfig.cmake.in
                                ${CMAKE_BINARY_DIR}/stofConfig.cmake INSTALL_DESTINATION ${cmake_dir})
  write_basic_package_version_file(${CMAKE_BINARY_DIR}/stofConfigVersion.cmake
                                   VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
  install(FILES ${CMAKE_BINARY_DIR}/stofConfig.cmake ${CMAKE_BINARY_DIR}/stofConfigVersion.cmake
          DESTINATION ${cmake_dir})

  # stof.pc: the shared library by default; --static adds what libstof.a needs.
  string(REPLACE ";" " " STOF_PC_REQUIRES_PRIVATE "${modules}")
  set(libs_private)
  if(cuda)
    list(APPEND libs_private "-L${CUDAToolkit_LIBRARY_DIR}")
    foreach(c ${cuda})
      list(APPEND libs_private "-l${c}")
    endforeach()
  endif()
  foreach(p ${plain})
    list(APPEND libs_private "-l${p}")
  endforeach()
  string(REPLACE ";" " " STOF_PC_LIBS_PRIVATE "${libs_private}")
  # The prefix relative to the .pc file, so that an installed tree can move.
  file(RELATIVE_PATH STOF_PC_UP /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
  string(REGEX REPLACE "/$" "" STOF_PC_UP "${STOF_PC_UP}")
  configure_file(${CMAKE_SOURCE_DIR}/cmake/stof.pc.in ${CMAKE_BINARY_DIR}/stof.pc @ONLY)
  install(FILES ${CMAKE_BINARY_DIR}/stof.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endfunction()

# The Python wheel (pip install . through scikit-build-core, pyproject.toml):
# libstof.so beside the package (python/stof/_lib.py looks there first) and the
# stof command in the environment's bin/. A wheel stores no symbolic links, so
# the library has one unversioned name.
function(stof_install_wheel)
  set_target_properties(stof PROPERTIES VERSION "" SOVERSION "" NO_SONAME ON)
  install(TARGETS stof LIBRARY DESTINATION lib)
  if(TARGET stof_cli)
    install(TARGETS stof_cli RUNTIME DESTINATION ${SKBUILD_SCRIPTS_DIR})
  endif()
endfunction()
