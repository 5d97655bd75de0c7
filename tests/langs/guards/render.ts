// render (response): answers what it saw, `content|original|model|node|iteration|run|state.k`,
// so a test reads every field of the event off the answer; a content of "keep" keeps it
// (nothing), "bad" answers a non-string (a fault).

import { defineGuard } from '@toolgate/guest';

export default defineGuard({
  onResponseRender(event) {
    if (event.content === 'keep') return undefined;
    if (event.content === 'bad') return 42 as never;
    const k = event.state.k;
    return [event.content, event.originalContent, event.model, event.nodeName, event.iterationIndex, event.runId, typeof k === 'string' ? k : ''].join('|');
  },
});
