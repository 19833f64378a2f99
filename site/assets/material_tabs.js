// Material for MkDocs' inline script from partials/javascripts/content.html (9.8.1, with
// content.tabs.link), unchanged, as a file for the Content-Security-Policy (site/overrides/).
var tabs=__md_get("__tabs");if(Array.isArray(tabs))e:for(var set of document.querySelectorAll(".tabbed-set")){var labels=set.querySelector(".tabbed-labels");for(var tab of tabs)for(var label of labels.getElementsByTagName("label"))if(label.innerText.trim()===tab){var input=document.getElementById(label.htmlFor);input.checked=!0;continue e}}
