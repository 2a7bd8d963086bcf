// The job page's files (page/index.html, app.js, app.css), built into the
// binary by cmake/EmbedText.cmake: the page needs nothing from elsewhere.
#ifndef COHORT_LAUNCH_JOB_PAGE_ASSETS_H_
#define COHORT_LAUNCH_JOB_PAGE_ASSETS_H_

namespace cohort::launch {

extern const char kJobPageHtml[];
extern const char kJobPageScript[];
extern const char kJobPageStyle[];

}  // namespace cohort::launch

#endif  // COHORT_LAUNCH_JOB_PAGE_ASSETS_H_
