// Empty: the precompiled-header targets (cmake/CohortPch.cmake) compile their
// header only.
