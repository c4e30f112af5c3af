/* storagelab web: a framed report or comparison (an iframe with data-src) starts loading once the page itself has
   loaded. Drawing it may take minutes (it is streamed into the frame) and a frame still loading holds its page's
   "load" until it is done: the page must not wait on it. No inline script (CSP script-src 'self'). */
(function () {
  'use strict';
  window.addEventListener('load', function () {
    document.querySelectorAll('iframe[data-src]').forEach(function (f) {
      if (!f.getAttribute('src')) f.src = f.dataset.src;
    });
  });
})();
