// Material for MkDocs' inline script from partials/javascripts/content.html (9.8.1), unchanged,
// as a file for the Content-Security-Policy (site/overrides/).
var target=document.getElementById(location.hash.slice(1));target&&target.name&&(target.checked=target.name.startsWith("__tabbed_"))
