// The Action's pull-request comment (action.yml, through actions/github-script): one comment per pull
// request, created once and updated on every push. It is found by its marker *and* its author — the
// identity behind the token — so another user's comment that happens to start with the marker is never
// edited. A token that may not comment (a fork's pull request is read-only) is a warning, never a red job:
// the gate's own outcome decides the job.
"use strict";

const MARKER = "<!-- robustexplain:pr-comment -->";

async function identity(github) {
  // A personal access token or an app's user token can say who it is; the workflow's GITHUB_TOKEN cannot
  // (403 "Resource not accessible by integration") and always comments as github-actions[bot].
  try {
    const { data } = await github.rest.users.getAuthenticated();
    return data.login;
  } catch (error) {
    return "github-actions[bot]";
  }
}

module.exports = async function postComment({ github, context, core, body }) {
  if (!body.startsWith(MARKER)) {
    throw new Error("the comment body does not start with the marker the next push looks for");
  }
  const { owner, repo } = context.repo;
  const issue_number = context.issue.number;
  try {
    const me = await identity(github);
    const comments = await github.paginate(github.rest.issues.listComments, { owner, repo, issue_number });
    const mine = comments.find((c) => c.user && c.user.login === me && c.body && c.body.startsWith(MARKER));
    if (mine) {
      await github.rest.issues.updateComment({ owner, repo, comment_id: mine.id, body });
      return { action: "updated", id: mine.id };
    }
    const { data } = await github.rest.issues.createComment({ owner, repo, issue_number, body });
    return { action: "created", id: data.id };
  } catch (error) {
    core.warning(`robustexplain: the pull-request comment was not posted (${error.status || ""} ` +
                 `${error.message}); the report is in the job summary and the uploaded artifact.`);
    return { action: "skipped", reason: error.message };
  }
};
module.exports.MARKER = MARKER;
